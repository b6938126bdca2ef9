"""`dslrun validate --data` for the detection inputters: every image, every box, and box statistics.

Lists the images as the inputter does (dsl/tasks/object_detection/_box_listing.py), every bad row or
annotation a located problem, and sums the boxes up: per image, per class, and their sides
at the fed image size against the network's anchors (a box far smaller than the smallest
anchor, or far larger than the largest, matches no anchor at the usual IoU 0.5 and is
never learnt). No TensorFlow.

The data check counts one class per example (it was written for classification): an image
is counted for the class of its boxes counted least so far, so a class is reported missing
from a split exactly when no box of the split has it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.data_check.examples import Example, Problem, Split
from dsl.inputters.common import as_list
from dsl.language.diagnostics import Location
from dsl.tasks.object_detection._box_listing import BoxProblem, ImageBoxes, class_names_of, listed_images

# A box whose side is below this share of the smallest anchor side (or above its inverse times
# the largest) overlaps every anchor with an IoU under 0.5.
ANCHOR_REACH = 0.5


class BoxStats:
    """Boxes per image, per class and their sides in pixels of the fed image."""

    def __init__(self, image_shape: list[int]) -> None:
        self.height, self.width = image_shape[0], image_shape[1]
        self.per_image: list[int] = []
        self.classes: Counter[int] = Counter()
        self.sides: list[float] = []

    def add(self, image: ImageBoxes) -> None:
        self.per_image.append(len(image.boxes))
        self.classes.update(image.labels)
        self.sides += box_sides([image], (self.height, self.width))

    def lines(self, pipeline: dict[str, Any], names: list[str] | None) -> list[str]:
        if not self.per_image:
            return []
        boxes = sum(self.per_image)
        lines = [f"{boxes} boxes, {min(self.per_image)}-{max(self.per_image)} per image "
                 f"(mean {boxes / len(self.per_image):.1f})"]
        if self.classes:
            lines.append("per class: " + ", ".join(
                f"{names[k] if names and k < len(names) else k} {count}" for k, count in sorted(self.classes.items())))
        if self.sides:
            ordered = sorted(self.sides)
            lines.append(f"box sides {ordered[0]:.0f}-{ordered[-1]:.0f} px (median {ordered[len(ordered) // 2]:.0f}) "
                         f"at {self.height}x{self.width}")
            lines += self._against_anchors(pipeline, ordered)
        return lines

    def _against_anchors(self, pipeline: dict[str, Any], sides: list[float]) -> list[str]:
        from dsl.tasks.object_detection._anchors import anchor_sides

        anchors = anchor_sides(pipeline.get("network") or {})
        return [f"anchors {min(anchors):.0f}-{max(anchors):.0f} px"] if anchors else []

    def anchor_warnings(self, pipeline: dict[str, Any], mode: str) -> list[tuple[tuple[str | int, ...], str]]:
        """Boxes of the fed image size that no anchor matches well, located at network.anchors
        (images shrunk by inputter.image_shape shrink their boxes, but not the anchors)."""
        from dsl.tasks.object_detection._anchors import anchor_sides

        misfit = anchor_misfit(self.sides, anchor_sides(pipeline.get("network") or {}), (self.height, self.width), mode)
        return [(("network", "anchors"), misfit)] if misfit else []


def anchor_misfit(sides: list[float], anchors: list[float], size: tuple[int, int], mode: str) -> str | None:
    """What `validate --data` and a run's start say when boxes of the fed image size match no anchor
    well (images shrunk by inputter.image_shape shrink their boxes, but not the anchors); else None."""
    if not anchors or not sides:
        return None
    low, high = min(anchors), max(anchors)
    small = sum(1 for side in sides if side < ANCHOR_REACH * low)
    large = sum(1 for side in sides if side > high / ANCHOR_REACH)
    if not small and not large:
        return None
    ordered = sorted(sides)
    return (f"{small + large} of the {len(ordered)} {mode} boxes match no anchor well at {size[0]}x{size[1]} "
            f"({small} smaller than half the smallest anchor, {low:.0f} px; {large} larger than twice the largest, "
            f"{high:.0f} px; IoU under 0.5 with every anchor): the boxes' sides are {ordered[0]:.0f}-{ordered[-1]:.0f} "
            f"px (median {ordered[len(ordered) // 2]:.0f}); make network.anchors.sizes cover them (the boxes "
            "scale with inputter.image_shape, the anchors do not)")


def box_sides(images: list[ImageBoxes], size: tuple[int, int]) -> list[float]:
    """Every box's side (the square root of its area) in pixels of the fed image."""
    height, width = size
    return [math.sqrt((y1 - y0) * height * (x1 - x0) * width) for image in images for y0, x0, y1, x1 in image.boxes]


def detection_split(params: dict[str, Any], mode: str, layout: str) -> Split:
    """The split of `mode`: an Example per image, a Problem per bad row or annotation, box statistics after."""
    stats = BoxStats(params.get("image_shape") or [64, 64, 3])
    names = class_names_of(params) if params.get("classes") is None or len(params["classes"]) == params["num_classes"] else None
    if names is None and layout == "coco":  # the categories' names, as training and predict name them
        from dsl.tasks.object_detection._box_listing import coco_class_names

        found = coco_class_names(params)
        names = found if found is not None and len(found) == params["num_classes"] else None
    split = Split(_items(params, mode, layout, stats), source=", ".join(as_list(params[mode])), class_names=names,
                  one_class_each=False)
    split.details = lambda pipeline: stats.lines(pipeline, names)
    split.warnings = lambda pipeline: stats.anchor_warnings(pipeline, mode)
    return split


def _items(params: dict[str, Any], mode: str, layout: str, stats: BoxStats) -> Iterator[Example | Problem]:
    counted: Counter[int] = Counter()
    for item in listed_images(params, mode, layout):
        if isinstance(item, str):
            yield Problem(item)
        elif isinstance(item, BoxProblem):
            if item.line:
                yield Problem(item.message, Location(item.file, item.line, 1))
            else:
                yield Problem(str(item))
        else:
            stats.add(item)
            # An image stands for its rarest class so far; one without boxes for none (counted as
            # class 0, images whose boxes were all refused made class 0 look 33x commoner: trial A10).
            label = min(set(item.labels), key=lambda k: (counted[k], k)) if item.labels else None
            if label is not None:
                counted[label] += 1
            where = Location(item.file, item.line or 1, 1)
            yield Example(label, item.origin if item.line else f"{Path(item.file).name}: {item.origin}", where, path=item.path)
