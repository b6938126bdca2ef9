"""`text_classification_csv`: labelled texts in UTF-8 CSV files with a header row.

    text,label
    "Quite bright, and ""not"" a drizzle.",0

RFC 4180 as Python's `csv` reads it (strict): a field holding a comma, a double quote or a
line break is quoted, a quote inside it doubled. The columns are found by name in the
header (`text_column`, `label_column`; other columns are ignored). A label is a class index
0..num_classes-1, or with `classes` also a class name. Every file is read and checked when the
pipeline is built, so a bad row stops the run before training with its file and line.

The texts become token ids with a vocabulary built from the train split and kept in the
run directory (see `dsl.tasks.text_classification._text`); the same folder layout as IMDB's is
`text_folder`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import MODES, as_list, check_num_classes, existing_file, source_params
from dsl.inputters.text_files import utf8_problem
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register, with_defaults
from dsl.language.rules import one_per_class
from dsl.tasks.text_classification._text import (
    CLASSES_PARAM,
    TEXT_COMMON_PARAMS,
    VOCABULARY_PARAMS,
    TextSplit,
)

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a UTF-8 CSV file with a header row", {"type": "string", "minLength": 1}),
    "num_classes": {
        "description": "Number of classes; labels are class indices 0 .. num_classes-1 (or names, see classes).",
        "type": "integer",
        "minimum": 2,
    },
    "classes": {
        **CLASSES_PARAM,
        "description": (
            "Class names in label order (label 0 first): a label may then be a name as well as an index, "
            "and predictions name their class. null = integer labels only."
        ),
    },
    "text_column": {
        "description": "Header name of the column holding the texts.",
        "type": "string",
        "minLength": 1,
        "default": "text",
    },
    "label_column": {
        "description": "Header name of the column holding the labels.",
        "type": "string",
        "minLength": 1,
        "default": "label",
    },
    **VOCABULARY_PARAMS,
    **TEXT_COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """`dslrun validate --data`: every text of `mode`'s CSVs (its class and a digest of it, for the
    class counts and the val texts copied from train) and every bad row, located."""
    from dsl.data_check.examples import Example, Problem, Split
    from dsl.language.diagnostics import Location
    from dsl.tasks.text_classification._text import text_digest, words

    p = with_defaults(params, PARAMS)
    values = as_list(p[mode])
    items: list[Any] = []
    for value in values:
        try:
            path = existing_file(value, f"inputter.{mode}", "synthetic-text")
        except DslError as exc:
            items.append(Problem(str(exc)))
            continue
        for line, text, label, problem in csv_rows(path, p):
            where = Location(str(path), line, 1)
            if problem is None:
                items.append(Example(label, f"{path.name} line {line}", where, digest=text_digest(text),
                                     words=words(text, p["standardize"])))
            else:
                items.append(Problem(problem, where))
    return Split(items, source=", ".join(values), class_names=p["classes"])


@register(
    "inputter",
    "text_classification_csv",
    rules=[one_per_class("classes", "class names", "inputter")],
    params=PARAMS,
    required=("num_classes",),
    examples=examples,
    batch=("tokens", "class"),
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Texts and labels in UTF-8 CSV files with a header row; a vocabulary built from the train split.

    Read and check every declared CSV now (errors name the file and line), then vectorise.
    """
    from dsl.tasks.text_classification._text_pipeline import TextInputter

    classes = list(params["classes"]) if params["classes"] else None
    if classes:
        check_num_classes(len(classes), params, "inputter.classes", f"it names {len(classes)} classes")
    splits = {mode: read_csvs(as_list(params[mode]), f"inputter.{mode}", params) for mode in MODES if params[mode] is not None}
    if not splits:
        raise DslError("the text_classification_csv inputter declares no data; set inputter.train (and val / test)")
    return TextInputter(params, splits, context, classes)


def read_csvs(values: list[str], key: str, params: dict[str, Any]) -> TextSplit:
    """The texts of the CSV files `values` (as written in the YAML under `key`), in file order;
    the first bad row is an error naming its file and line."""
    split = TextSplit(key)
    for value in values:
        path = existing_file(value, key, "synthetic-text")
        before = len(split)
        for line, text, label, problem in csv_rows(path, params):
            if problem is not None:
                raise DslError(f"{path} line {line}: {problem}")
            split.add(text, label)
        if len(split) == before:
            raise DslError(f"{path}: lists no texts; expected a header row, then one row per text")
    return split


def csv_rows(path: Path, params: dict[str, Any]) -> Iterator[tuple[int, str, int, str | None]]:
    """(line, text, label, None) for every row of one CSV, or (line, "", -1, problem) for a bad
    one; a problem with the file itself (encoding, header, quoting) ends it."""
    try:
        data = path.read_bytes()
        content = data.decode("utf-8-sig")
    except OSError as exc:
        yield 1, "", -1, f"cannot read the file: {exc.strerror or exc}"
        return
    except UnicodeDecodeError as exc:
        line, reason = utf8_problem(data, exc)
        yield line, "", -1, reason
        return
    reader = csv.reader(io.StringIO(content, newline=""), strict=True)
    columns: tuple[int, int, int] | None = None  # (fields, text index, label index)
    start = 1  # the line the next record starts on
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if columns is None:
                columns, problem = _columns(row, params)
                if problem:
                    yield line, "", -1, problem
                    return
                continue
            if len(row) != columns[0]:
                yield line, "", -1, (f"expected {columns[0]} fields as in the header, found {len(row)}; "
                                     'a text holding commas must be quoted ("...", a quote inside doubled)')
                continue
            label, problem = _label(row[columns[2]], params)
            yield line, row[columns[1]], label, problem
    except csv.Error as exc:
        yield reader.line_num, "", -1, f"{exc}; expected RFC 4180 CSV"


def _columns(header: list[str], params: dict[str, Any]) -> tuple[tuple[int, int, int], str | None]:
    """(number of fields, text index, label index) from the header row, or what is wrong with it."""
    names = [cell.strip() for cell in header]
    found = []
    for setting in ("text_column", "label_column"):
        name = params[setting]
        if name not in names:
            return (0, 0, 0), (f"the header has no column {name!r} (it has {', '.join(map(repr, names))}); "
                               f"set inputter.{setting} to the column's name, or add a header row")
        found.append(names.index(name))
    return (len(header), found[0], found[1]), None


def _label(cell: str, params: dict[str, Any]) -> tuple[int, str | None]:
    """The class index of a label cell (one of `classes` by name first, else an integer in
    range), or what is wrong with it."""
    text, classes, count = cell.strip(), params["classes"] or [], params["num_classes"]
    if text in classes:
        return classes.index(text), None
    try:
        label = int(text)
    except ValueError:
        if classes:
            return -1, f"label {text!r} is neither one of inputter.classes ({_shown(classes)}) nor a class index 0..{count - 1}"
        return -1, (f"label {text!r} is not an integer; labels are class indices 0..{count - 1} "
                    "(or class names when inputter.classes lists them)")
    if not 0 <= label < count:
        return -1, f"label {label} is outside 0..{count - 1}; fix the row or set inputter.num_classes"
    return label, None


def _shown(classes: list[str]) -> str:
    return ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
