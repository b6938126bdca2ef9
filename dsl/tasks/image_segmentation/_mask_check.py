"""`dslrun validate --data` for the segmentation inputter: every mask read with Pillow, no TensorFlow.

A mask is checked for what would stop training minutes in: unreadable, not single-channel
(a colour or palette mask), not its image's size, or holding a value that is neither a
class nor `ignore_label`. Each problem is located at its CSV line.

The data check counts one class per example (it was written for classification). An
image of a segmentation set shows several classes; it is counted for the class it shows
that has been counted least so far, so a class is reported missing from a split exactly
when no mask of the split shows it, and the counts stay one per image (steps per epoch
are right).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from dsl.data_check.examples import Example, Problem
from dsl.language.diagnostics import Location


def mask_examples(rows: Iterable[Any], params: dict[str, Any]) -> Iterator[Example | Problem]:
    """An Example per usable row (its image still to inspect), a located Problem per bad mask."""
    counted: Counter[int] = Counter()
    severity = "warning" if params.get("skip_corrupt") else "error"
    for item in rows:
        if isinstance(item, Problem):
            yield item
            continue
        csv_path, line, (image, mask) = item
        where = Location(str(csv_path), line, 1)
        pixels, problem = _mask_classes(image, mask, params)
        if problem:
            yield Problem(f"mask {mask}: {problem}", where, severity)
            continue
        classes = sorted(pixels)
        label = min(classes, key=lambda k: (counted[k], k)) if classes else 0
        counted[label] += 1
        yield Example(label, f"{Path(csv_path).name} line {line}", where, path=image, pixels=pixels)


def _mask_classes(image: str, mask: str, params: dict[str, Any]) -> tuple[dict[int, int], str | None]:
    """The pixels of each class `mask` shows, or why it is unusable (None when the image itself is
    at fault: the data check reports that)."""
    from PIL import Image

    try:
        with Image.open(mask) as opened:
            mode, size = opened.mode, opened.size
            colours = opened.getcolors(256) if mode == "L" else None
    except Exception as exc:  # any decoder failure means the file is bad
        return {}, f"cannot be read ({type(exc).__name__}: {exc})"
    if mode != "L":
        return {}, (f"Pillow mode {mode}, not a single-channel 8-bit PNG of class indices (mode L); "
                    "convert colour-coded or palette masks to class indices first")
    try:
        with Image.open(image) as opened:
            image_size = opened.size
    except Exception:  # the image's own check reports it
        image_size = size
    if image_size != size:
        return {}, f"is {size[1]}x{size[0]} pixels but its image {image} is {image_size[1]}x{image_size[0]}; a mask must have its image's size"
    values = sorted(value for _, value in colours or [])
    classes, ignore = params["num_classes"], params.get("ignore_label")
    bad = [value for value in values if value >= classes and value != ignore]
    if bad:
        allowed = f"classes 0..{classes - 1}" + (f" or ignore_label {ignore}" if ignore is not None else "")
        return {}, f"has the value {bad[0]}, which is none of {allowed}; fix the mask or set inputter.num_classes"
    return {cast(int, value): count for count, value in colours or [] if value < classes}, None
