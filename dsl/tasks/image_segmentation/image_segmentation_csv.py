"""`image_segmentation_csv`: images and their class-index masks, listed in CSV files as `image_path,mask_path` rows.

The CamVid layout of the Lambda demo, and what `dslrun data synthetic-segmentation` writes:
one row per image, both paths relative to the CSV's own folder (absolute paths work too).
A mask is a single-channel (8-bit grayscale) PNG the size of its image whose pixel values
are class indices 0..num_classes-1, or `ignore_label` for pixels that count in no loss nor
metric (unlabelled, void). A colour-coded (RGB or palette) mask must be converted first.

The CSVs are read in Python when the pipeline is built, and every mask file is checked to
exist then, so a bad row is reported with its file and line before training starts; the
pixels are read by tf.data, which stops with one line naming the file and CSV line of a
mask whose size or values are wrong (dsl/tasks/image_segmentation/_masks.py).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    COMMON_PARAMS,
    MODES,
    Listing,
    as_list,
    data_rows,
    existing_file,
    image_shape_param,
    skipped_outputs,
    source_params,
)
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import checked, one_per_class

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a CSV file of `image_path,mask_path` rows", {"type": "string", "minLength": 1}),
    "num_classes": {
        "description": "Classes of a pixel, background included; mask values are 0 .. num_classes-1 (or ignore_label).",
        "type": "integer",
        "minimum": 2,
        "maximum": 255,
    },
    "ignore_label": {
        "description": (
            "A mask value that counts in no loss nor metric (unlabelled or void pixels, and the padding of "
            "a crop); null = every mask value must be a class."
        ),
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 255,
        "default": 255,
    },
    "class_names": {
        "description": "Names of the classes, class 0 first (predict records use them); null = numbered.",
        "type": ["array", "null"],
        "items": {"type": "string", "minLength": 1},
        "minItems": 2,
        "default": None,
    },
    "image_shape": image_shape_param(),
    "header": {
        "description": (
            "Whether the CSVs start with a header row: auto (skip the first row when neither of its cells "
            "has a file extension, e.g. `image_path,mask_path`), true or false."
        ),
        "enum": ["auto", True, False],
        "default": "auto",
    },
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """The examples of `mode` for `dslrun validate --data`: every row's image, each bad row or mask a
    located problem (dsl/tasks/image_segmentation/_mask_check.py)."""
    from dsl.data_check.examples import Split
    from dsl.tasks.image_segmentation._mask_check import mask_examples

    values = as_list(params[mode])
    rows = (item for value in values for item in _listed_rows(value, f"inputter.{mode}", params))
    return Split(mask_examples(rows, params), source=", ".join(values), class_names=params.get("class_names"))


def _check_ignore_label(p: dict[str, Any]) -> None:
    """ignore_label is no class (a component rule: `dslrun validate` runs it too)."""
    classes, ignore = p["num_classes"], p.get("ignore_label")
    if ignore is not None and ignore < classes:
        raise DslError(
            f"inputter.ignore_label: {ignore} is also a class (0..{classes - 1}), so its pixels would count "
            "and not count; use a value of num_classes or more (255 is usual), or null"
        )


@register(
    "inputter",
    "image_segmentation_csv",
    rules=[one_per_class("class_names", "class names", "inputter"), checked(_check_ignore_label, ("inputter", "num_classes"))],
    params=PARAMS,
    required=("num_classes",),
    outputs=skipped_outputs,
    examples=examples,
    batch=("image", "mask"),
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Images and class-index PNG masks listed in CSV files of `image_path,mask_path` rows (CamVid layout).

    Read every declared CSV now (errors name the file and line); pixels are read while training.
    """
    from dsl.tasks.image_segmentation._masks import SegmentationInputter

    _check_settings(params)
    listings = {}
    for mode in MODES:
        if params[mode] is not None:
            listings[mode] = read_csvs(as_list(params[mode]), f"inputter.{mode}", params["header"], params["skip_corrupt"])
    return SegmentationInputter(params, listings)


def read_csvs(values: list[str], key: str, header: str | bool = "auto",
              missing_ok: bool = False) -> tuple[Listing, Listing]:
    """The images and masks of the CSV files `values` (paths as written in the YAML under `key`),
    as two listings with the same origins; a missing mask is an error unless `missing_ok`
    (skip_corrupt leaves such pairs out later, counted)."""
    images, masks = Listing(key), Listing(key)
    for value in values:
        csv_path = _existing_csv(value, key)
        before = len(images)
        images.start_csv(csv_path)
        masks.start_csv(csv_path)
        try:
            for line, row in _data_rows(csv_path, header):
                image, mask = _pair(csv_path, line, row, missing_ok)
                images.add(image, 0, line)
                masks.add(mask, 0, line)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise DslError(f"{key}: cannot read {csv_path}: {exc}; expected a UTF-8 CSV of `image_path,mask_path` rows") from None
        if len(images) == before:
            raise DslError(f"{key}: {value} lists no images; expected rows `image_path,mask_path`")
    return images, masks


def _existing_csv(value: str, key: str) -> Path:
    return existing_file(value, key, "synthetic-segmentation")


def _check_settings(p: dict[str, Any]) -> None:
    classes, names = p["num_classes"], p["class_names"]
    _check_ignore_label(p)
    if names is not None and len(names) != classes:
        raise DslError(f"inputter.class_names: {len(names)} names for num_classes {classes}; give one name per class")


def _pair(csv_path: Path, line: int, row: list[str], missing_ok: bool) -> tuple[str, str]:
    """The (image, mask) paths of one row, or a DslError naming the file and line."""
    if len(row) != 2:
        raise DslError(f"{csv_path} line {line}: expected 2 columns `image_path,mask_path`, found {len(row)}: "
                       f"{','.join(row)[:80]}")
    image, mask = (cell.strip() for cell in row)
    if not image or not mask:
        raise DslError(f"{csv_path} line {line}: the {'image' if not image else 'mask'} path is empty")
    image, mask = (os.path.normpath(os.path.join(csv_path.parent, cell)) for cell in (image, mask))
    if not missing_ok and not os.path.isfile(mask):
        raise DslError(f"{csv_path} line {line}: mask file {mask} does not exist; fix the row or create the mask")
    return image, mask


def _listed_rows(value: str, key: str, params: dict[str, Any]) -> Iterator[Any]:
    """(csv, line, (image, mask)) of every row of one CSV, or a Problem (validate --data goes on)."""
    from dsl.data_check.examples import Problem
    from dsl.language.diagnostics import Location

    try:
        csv_path = _existing_csv(value, key)
    except DslError as exc:
        yield Problem(str(exc))
        return
    rows = 0
    try:
        for line, row in _data_rows(csv_path, params["header"]):
            rows += 1
            try:
                yield csv_path, line, _pair(csv_path, line, row, missing_ok=False)
            except DslError as exc:
                yield Problem(str(exc).split(": ", 1)[1], Location(str(csv_path), line, 1))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        yield Problem(f"cannot read {csv_path}: {exc}; expected a UTF-8 CSV of `image_path,mask_path` rows")
        return
    if not rows:
        yield Problem(f"{value} lists no images; expected rows `image_path,mask_path`")


def _data_rows(csv_path: Path, header: str | bool) -> Iterator[tuple[int, list[str]]]:
    """(line, row) of every non-blank row, the header row left out."""
    return data_rows(csv_path, lambda row: header is True or (
        header == "auto" and not any(os.path.splitext(cell.strip())[1] for cell in row)))
