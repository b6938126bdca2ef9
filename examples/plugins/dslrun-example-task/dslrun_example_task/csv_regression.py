"""`csv_regression`: rows of numbers in CSV files with a header row, one column the target.

    x1,x2,x3,target
    0.12,-1.5,3.0,7.25

The columns are found by name in the header: `feature_columns` (in the order the network
receives them) and `target_column`; other columns are ignored. Every cell read must be a finite
number. Every file is read and checked when the pipeline is built, so a bad row stops the run
before training with its file and line; `dslrun validate --data` lists every bad row at once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import COMMON_PARAMS, MODES, as_list, existing_file, source_params
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register, with_defaults

# A row read: (line, features, target, None), or (line, [], nan, what is wrong with it).
Row = tuple[int, list[float], float, str | None]

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a UTF-8 CSV file with a header row", {"type": "string", "minLength": 1}),
    "feature_columns": {
        "description": "Header names of the feature columns, in the order the network receives them.",
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "uniqueItems": True,
    },
    "target_column": {
        "description": "Header name of the column holding the number to predict.",
        "type": "string",
        "minLength": 1,
        "default": "target",
    },
    **{name: COMMON_PARAMS[name] for name in ("batch_size", "drop_remainder", "shuffle_buffer", "prefetch")},
}


def facts(params: dict[str, Any]) -> dict[str, Any]:
    """What `dslrun validate` knows of the data from the parameters alone: the row's length."""
    return {"num_features": len(params.get("feature_columns") or [])}


def examples(params: dict[str, Any], mode: str) -> Any:
    """`dslrun validate --data`: every row of `mode`'s CSVs (a digest of it, so val rows copied
    from train are counted) and every bad row, at its file and line."""
    from dsl.data_check.examples import Example, Problem, Split
    from dsl.language.diagnostics import Location

    p = with_defaults(params, PARAMS)
    items: list[Any] = []
    for value in as_list(p[mode]):
        try:
            path = existing_file(value, f"inputter.{mode}", "synthetic-regression")
        except DslError as exc:
            items.append(Problem(str(exc)))
            continue
        for line, row, target, problem in csv_rows(path, p):
            where = Location(str(path), line, 1)
            if problem is None:
                digest = hashlib.sha1(repr((row, target)).encode()).digest()
                items.append(Example(None, f"{path.name} line {line}", where, digest=digest))
            else:
                items.append(Problem(problem, where))
    return Split(items, source=", ".join(as_list(p[mode])))


@register(
    "inputter",
    "csv_regression",
    params=PARAMS,
    required=("feature_columns",),
    facts=facts,
    examples=examples,
    batch=("features", "value"),
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Numeric feature columns and a target column in CSV files with a header row (regression).

    Read and check every declared CSV now (errors name the file and line), then hold the rows in memory.
    """
    from dslrun_example_task._rows import RowsInputter

    splits = {mode: read_csvs(as_list(params[mode]), f"inputter.{mode}", params)
              for mode in MODES if params[mode] is not None}
    if not splits:
        raise DslError("the csv_regression inputter declares no data; set inputter.train (and val / test)")
    return RowsInputter(params, splits)


def read_csvs(values: list[str], key: str, params: dict[str, Any]) -> tuple[list[list[float]], list[float]]:
    """(feature rows, targets) of the CSV files `values` (as written under `key`), in file order;
    the first bad row is an error naming its file and line."""
    rows: list[list[float]] = []
    targets: list[float] = []
    for value in values:
        path = existing_file(value, key, "synthetic-regression")
        before = len(rows)
        for line, row, target, problem in csv_rows(path, params):
            if problem is not None:
                raise DslError(f"{path} line {line}: {problem}")
            rows.append(row)
            targets.append(target)
        if len(rows) == before:
            raise DslError(f"{path}: lists no rows; expected a header row, then one row per example")
    return rows, targets


def csv_rows(path: Path, params: dict[str, Any], with_target: bool = True) -> Iterator[Row]:
    """Every row of one CSV, read or with its problem; a problem with the file itself (encoding,
    header, quoting) ends it. Without `with_target` (rows to predict) the target is nan."""
    names = [*params["feature_columns"], *([params["target_column"]] if with_target else [])]
    try:
        content = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        yield 1, [], math.nan, f"cannot read the file: {exc.strerror or exc}"
        return
    except UnicodeDecodeError as exc:
        yield 1, [], math.nan, f"not UTF-8 ({exc.reason} at byte {exc.start}); save the file as UTF-8"
        return
    reader = csv.reader(io.StringIO(content, newline=""), strict=True)
    columns: list[int] | None = None  # the feature columns' indices, then the target's
    width = 0
    start = 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in cells):
                continue
            if columns is None:
                columns, problem = _columns(cells, names)
                if problem:
                    yield line, [], math.nan, problem
                    return
                width = len(cells)
                continue
            if len(cells) != width:
                yield line, [], math.nan, f"expected {width} fields as in the header, found {len(cells)}"
                continue
            yield _numbers(line, [cells[index] for index in columns], names, with_target)
    except csv.Error as exc:
        yield reader.line_num, [], math.nan, f"{exc}; expected RFC 4180 CSV"


def _columns(header: list[str], wanted: list[str]) -> tuple[list[int], str | None]:
    """The indices of the `wanted` columns (features, then the target), or what is wrong with the header."""
    names = [cell.strip() for cell in header]
    missing = [name for name in wanted if name not in names]
    if missing:
        return [], (f"the header has no column {', '.join(map(repr, missing))} (it has {', '.join(map(repr, names))}); "
                    "fix inputter.feature_columns / inputter.target_column, or add a header row")
    return [names.index(name) for name in wanted], None


def _numbers(line: int, cells: list[str], names: list[str], with_target: bool) -> Row:
    """The row's features and target as floats, or the first cell that is no finite number."""
    values = []
    for name, cell in zip(names, cells):
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            return line, [], math.nan, f"column {name!r}: {cell.strip()!r} is not a finite number"
        values.append(value)
    return (line, values[:-1], values[-1], None) if with_target else (line, values, math.nan, None)
