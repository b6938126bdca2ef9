"""`image_classification_csv`: images listed in CSV files as `path,label` rows.

The format of the Lambda demo and of `dslrun data`: one row per image, the path relative
to the CSV's own folder (absolute paths work too), the label an integer class index or,
when `classes` lists them, a class name (as the detection and text CSVs take them).
The CSVs are read in Python when the pipeline is built (cheap, and every bad row is
reported with its file and line before training starts); the images are read by tf.data.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    COMMON_PARAMS,
    MODES,
    NUM_CLASSES_PARAM,
    Listing,
    as_list,
    check_num_classes,
    data_rows,
    existing_file,
    image_shape_param,
    skipped_outputs,
    source_params,
)
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import one_per_class
from dsl.language.suggest import did_you_mean
from dsl.tasks.image_classification._host_files import csv_images

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a CSV file of `path,label` rows", {"type": "string", "minLength": 1}),
    "num_classes": NUM_CLASSES_PARAM,
    "classes": {
        "type": ["array", "null"],
        "items": {"type": "string", "minLength": 1},
        "minItems": 2,
        "uniqueItems": True,
        "default": None,
        "description": (
            "Class names in label order (label 0 first), one per class: the CSVs' labels may be these names, "
            "and `dslrun predict` names each prediction's class (`name`), as image_folder and text inputters "
            "do. null = indices only."
        ),
    },
    "image_shape": image_shape_param(),
    "header": {
        "description": (
            "Whether the CSVs start with a header row: auto (skip the first row when its label "
            "is not an integer and its path names no image file), true or false."
        ),
        "enum": ["auto", True, False],
        "default": "auto",
    },
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """The examples of `mode` for `dslrun validate --data`: every row, each bad one a located problem."""
    from dsl.data_check.examples import Split

    values = as_list(params[mode])
    return Split(_csv_examples(values, f"inputter.{mode}", params), source=", ".join(values))


@register(
    "inputter",
    "image_classification_csv",
    params=PARAMS,
    required=("num_classes",),
    outputs=skipped_outputs,
    examples=examples,
    rules=[one_per_class("classes", "class names", "inputter")],
    batch=("image", "class"),
    host_files=csv_images,
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Images (PNG, JPEG, BMP, GIF) listed in CSV files of `path,label` rows (paths relative to the CSV).

    Read every declared CSV now (errors name the file and line); images are read while training.
    """
    from dsl.inputters.pipeline import FileListInputter

    listings = {}
    for mode in MODES:
        if params[mode] is not None:
            key = f"inputter.{mode}"
            listings[mode] = read_csvs(as_list(params[mode]), key, params["num_classes"], params["header"],
                                       params["classes"])
    inputter = FileListInputter(params, listings, tuple(params["image_shape"]), params["num_classes"])
    if params["classes"]:
        check_num_classes(len(params["classes"]), params, "inputter.classes", f"it names {len(params['classes'])} classes")
        inputter.class_names = list(params["classes"])
    return inputter


def read_csvs(values: list[str], key: str, num_classes: int, header: str | bool = "auto",
              classes: list[str] | None = None) -> Listing:
    """The examples of the CSV files `values` (paths as written in the YAML under `key`); labels are
    indices, or names of `classes`."""
    listing = Listing(key)
    for value in values:
        csv_path = existing_file(value, key)
        before = len(listing)
        _read_csv(csv_path, listing, num_classes, header, classes)
        if len(listing) == before:
            raise DslError(f"{key}: {value} lists no images; expected rows `path,label`")
    return listing


def _read_csv(csv_path: Path, listing: Listing, num_classes: int, header: str | bool,
              classes: list[str] | None) -> None:
    folder = csv_path.parent
    listing.start_csv(csv_path)
    try:
        for line, row in _data_rows(csv_path, header):
            label = _row_label(row, num_classes, classes, first=line == 1)  # a header skipped: no hint
            if isinstance(label, str):
                raise DslError(f"{csv_path} line {line}: {label}")
            listing.add(os.path.normpath(os.path.join(folder, row[0].strip())), label, line)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DslError(f"{listing.key}: {_unreadable(csv_path, exc)}") from None


def _data_rows(csv_path: Path, header: str | bool) -> Iterator[tuple[int, list[str]]]:
    """(line, row) of every non-blank row, the header row left out."""
    return data_rows(csv_path, lambda row: header is True or (header == "auto" and _looks_like_header(row)))


# What a data row's first cell names: an image file (a header's says `path`, `filename`, ...).
_IMAGE_NAME = re.compile(r"\.(png|jpe?g|gif|bmp|webp)$", re.IGNORECASE)


def _looks_like_header(row: list[str]) -> bool:
    """`header: auto`: a first row whose label is no integer is a header, unless it names an image —
    then it is a data row with a bad label (`img/0.png,cat`), reported at its line, not dropped."""
    label = row[1] if len(row) > 1 else ""
    return not _is_integer(label) and not _IMAGE_NAME.search(row[0].strip())


def _unreadable(csv_path: Path, exc: Exception) -> str:
    return f"cannot read {csv_path}: {exc}; expected a UTF-8 CSV of `path,label` rows"


def _row_label(row: list[str], num_classes: int, classes: list[str] | None, first: bool = False) -> int | str:
    """The class index of one `path,label` row, or what is wrong with it. The header hint is
    for the first row only: a trial was told to set `header: true` for its row 145."""
    if len(row) != 2:
        return f"expected 2 columns `path,label`, found {len(row)}: {','.join(row)[:80]}"
    path, text = row[0].strip(), row[1].strip()
    if not path:
        return "the image path is empty"
    if classes and text in classes:
        return classes.index(text)
    if not _is_integer(text):
        hint = " (set inputter.header: true if this row is a header)" if first else ""
        if classes:
            shown = ", ".join(classes[:12]) + (", ..." if len(classes) > 12 else "")
            return (f"unknown label {text!r}; expected one of inputter.classes ({shown}) or a class index"
                    f"{did_you_mean(text, classes)}{hint}")
        return (f"label {text!r} is not an integer; labels are class indices 0..{num_classes - 1}, or class names "
                f"when inputter.classes lists them{hint}")
    label = int(text)
    if not 0 <= label < num_classes:
        return f"label {label} is outside 0..{num_classes - 1}; fix the row or set inputter.num_classes"
    return label


def _csv_examples(values: list[str], key: str, params: dict[str, Any]) -> Iterator[Any]:
    from dsl.data_check.examples import Example, Problem
    from dsl.language.diagnostics import Location

    for value in values:
        try:
            csv_path = existing_file(value, key)
        except DslError as exc:
            yield Problem(str(exc))
            continue
        rows = 0
        try:
            for line, row in _data_rows(csv_path, params["header"]):
                rows += 1
                where = Location(str(csv_path), line, 1)
                label = _row_label(row, params["num_classes"], params.get("classes"), first=line == 1)
                if isinstance(label, str):
                    yield Problem(label, where)
                    continue
                path = os.path.normpath(os.path.join(csv_path.parent, row[0].strip()))
                yield Example(label, f"{csv_path.name} line {line}", where, path=path)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            yield Problem(_unreadable(csv_path, exc))
            continue
        if not rows:
            yield Problem(f"{value} lists no images; expected rows `path,label`")


def _is_integer(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True
