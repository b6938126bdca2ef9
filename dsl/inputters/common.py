"""What every inputter shares: its parameters, their defaults, and how sources are named.

TensorFlow-free: the public inputter modules import this at their top, and
`dslrun validate` imports those. The tf.data code lives in `_pipeline.py`.

Source keys. Inputters that read files declare their data per mode under the keys
`train`, `val` and `test` (null = no data for that mode), so the language's checks can
tell whether a workflow with a `val` phase has val data without building anything:
`declared_modes(params)` answers that for every inputter type.
"""

from __future__ import annotations

import bisect
import copy
import csv
import glob
import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.language.errors import DslError
from dsl.language.sections import fixed_array

MODES = ("train", "val", "test")

COMMON_PARAMS: dict[str, dict[str, Any]] = {
    "batch_size": {
        "description": (
            "The global batch: with runner.batch_scaling none (the default) N processes each take "
            "batch_size / N, so N ranks learn what one does; with linear, each process takes batch_size "
            "(the global batch N x batch_size)."
        ),
        "type": "integer",
        "minimum": 1,
        "default": 64,
    },
    "drop_remainder": {
        "description": "Drop the last train batch when it is smaller than batch_size (val and test never drop).",
        "type": "boolean",
        "default": True,
    },
    "shuffle_buffer": {
        "description": "Examples in the train shuffle buffer; 0 = keep the file order.",
        "type": "integer",
        "minimum": 0,
        "default": 10000,
    },
    "cache": {
        "description": "Keep the decoded images in memory after the first pass (fast epochs; needs RAM for the whole set).",
        "type": "boolean",
        "default": False,
    },
    "skip_corrupt": {
        "description": (
            "Skip missing or undecodable images (counted and reported) instead of stopping the run with "
            "an error naming the file; each skipped example is replaced by another of the same epoch."
        ),
        "type": "boolean",
        "default": False,
    },
    "num_parallel_calls": {
        "description": "Images decoded and augmented in parallel: autotune (TensorFlow decides) or a number.",
        "anyOf": [{"type": "string", "enum": ["autotune"]}, {"type": "integer", "minimum": 1}],
        "default": "autotune",
    },
    "prefetch": {
        "description": "Batches prepared ahead of the training step: autotune (TensorFlow decides), a number, or 0 for none.",
        "anyOf": [{"type": "string", "enum": ["autotune"]}, {"type": "integer", "minimum": 0}],
        "default": "autotune",
    },
}


def skipped_outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """The phase output `skipped_examples` that inputters listing files report under `skip_corrupt`."""
    if not params.get("skip_corrupt"):
        return {}
    return {"train": ["skipped_examples"], "val": ["skipped_examples"]}


def image_shape_param(default: list[int] | None = None) -> dict[str, Any]:
    """The `image_shape` parameter: [height, width, channels], channels 1 or 3."""
    return {
        "description": (
            "Shape [height, width, channels] of the images the network receives; every image is "
            "resized to it, channels 1 = grayscale, 3 = RGB."
        ),
        **fixed_array(
            {"type": "integer", "minimum": 1, "description": "Height in pixels."},
            {"type": "integer", "minimum": 1, "description": "Width in pixels."},
            {"type": "integer", "enum": [1, 3], "description": "Channels: 1 (grayscale) or 3 (RGB)."},
        ),
        "default": list(default or [32, 32, 3]),
    }


@dataclass
class Listing:
    """The examples of one mode, listed in Python: image paths, labels, and where each was listed.

    Knowing where each path was listed lets an error deep inside tf.data name the CSV line
    an image came from. Labels and line numbers are compact arrays: a listing of a million
    images stays a few tens of MB.
    """

    key: str  # the YAML key, e.g. "inputter.train"
    paths: list[str] = field(default_factory=list)
    labels: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))  # CSV line of each example
    csv_files: list[tuple[int, str]] = field(default_factory=list)  # (first example's index, CSV path)

    def __len__(self) -> int:
        return len(self.paths)

    def add(self, path: str, label: int, line: int = 0) -> None:
        self.paths.append(path)
        self.labels.append(label)
        self.lines.append(line)

    def start_csv(self, csv_path: str | os.PathLike[str]) -> None:
        """The examples added from now on come from `csv_path`."""
        self.csv_files.append((len(self.paths), str(csv_path)))

    def origin(self, index: int) -> str:
        """Where example `index` was listed: a CSV file and line, or its folder."""
        if not self.csv_files:
            return f"folder {os.path.dirname(self.paths[index])}"
        starts = [start for start, _ in self.csv_files]
        return f"{self.csv_files[bisect.bisect_right(starts, index) - 1][1]} line {self.lines[index]}"


NUM_CLASSES_PARAM: dict[str, Any] = {
    "description": "Number of classes; labels are integers 0 .. num_classes-1.",
    "type": "integer",
    "minimum": 2,
}

# num_classes of an inputter whose classes are its sub-folders: counted from them when left out.
FOLDER_NUM_CLASSES_PARAM: dict[str, Any] = {
    "description": (
        "Number of classes (class sub-folders); null = the length of `classes`, else the number of "
        "sub-folders of the train folder (a stated number is checked against them)."
    ),
    "type": ["integer", "null"],
    "minimum": 2,
    "default": None,
}


def source_params(what: str, item_schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`train`, `val` and `test`: each null (no data for that mode) or `what` (a path or a list of them)."""
    any_source = {
        "anyOf": [
            {"type": "null"},
            item_schema,
            {"type": "array", "items": item_schema, "minItems": 1},
        ],
        "default": None,
    }
    usage = {"train": "training", "val": "validation (workflow val phases)", "test": "`dslrun eval --mode test`"}
    return {
        mode: {
            **copy.deepcopy(any_source),
            "description": (
                f"Data for {usage[mode]}: {what}, or a list of them; null = none. Relative paths are "
                "relative to the directory dslrun is started from."
            ),
        }
        for mode in MODES
    }



def declared_modes(params: dict[str, Any]) -> tuple[str, ...]:
    """The modes a resolved inputter section provides data for, without reading any file.

    Sections with `train`/`val`/`test` keys provide the modes whose value is not null;
    `synthetic` provides the modes whose `num_examples` is above 0; a type without either
    (e.g. `cifar10_binary`) provides every mode.
    """
    if any(mode in params for mode in MODES):
        return tuple(mode for mode in MODES if params.get(mode) is not None)
    counts = params.get("num_examples")
    if isinstance(counts, dict):
        return tuple(mode for mode in MODES if counts.get(mode, 1) > 0)
    return MODES


def as_list(value: str | list[str] | None) -> list[str]:
    """A source value (one path or a list) as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def relative_note(value: str) -> str:
    """` (relative paths are relative to CWD)` for a relative `value` (the usual surprise), nothing for
    an absolute one (trial A12 read "relative to" under its absolute path); and the nearest existing
    path when one part looks misspelt (`; did you mean data/train.csv?`)."""
    from dsl.language.suggest import path_did_you_mean

    note = "" if os.path.isabs(os.path.expanduser(value)) else f" (relative paths are relative to {os.getcwd()})"
    return note + path_did_you_mean(os.path.expanduser(value))


def existing_file(value: str, key: str, generator: str = "synthetic") -> Path:
    """`value` as an absolute path to an existing file, or a DslError naming the YAML `key` and the
    `dslrun data` generator of the inputter's task (`synthetic-text` for a text CSV)."""
    path = Path(value).expanduser()
    if not path.is_file():
        where = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise DslError(
            f"{key}: {value} {where}{relative_note(value)}; "
            f"fix the path or create the data, e.g. with `dslrun data {generator} --out DIR`"
        )
    return path.resolve()


def existing_dir(value: str, key: str) -> Path:
    """`value` as an absolute path to an existing directory, or a DslError naming `key`."""
    path = Path(value).expanduser()
    if not path.is_dir():
        where = "is a file, not a directory" if path.exists() else "does not exist"
        raise DslError(f"{key}: {value} {where}{relative_note(value)}; fix the path")
    return path.resolve()


def expand_globs(values: list[str], key: str) -> list[Path]:
    """Paths and glob patterns as the sorted files they name; a pattern matching nothing is an error."""
    files: list[Path] = []
    for value in values:
        if glob.has_magic(value):
            matches = sorted(p for p in glob.glob(os.path.expanduser(value)) if os.path.isfile(p))
            if not matches:
                raise DslError(f"{key}: the pattern {value} matches no file (relative to {os.getcwd()}); fix the pattern")
            files.extend(Path(p).resolve() for p in matches)
        else:
            files.append(existing_file(value, key))
    return files


def folder_class_names(params: dict[str, Any]) -> dict[str, Any]:
    """The registered `facts` of an inputter whose classes are sub-folders (image_folder,
    text_folder) when `classes` is null: the sorted sub-folder names of its first declared mode's
    folders, as `build` takes them, so that plain `validate` knows the class names too (a trial's
    base head was restored onto other classes without a word when both pipelines named none).
    Nothing when the folders are not there (validate warns of those elsewhere)."""
    if params.get("classes"):
        return {}
    dirs = next((as_list(params[mode]) for mode in MODES if params.get(mode)), [])
    try:
        names = sub_folders([Path(folder).expanduser() for folder in dirs])
    except OSError:
        return {}
    return {"class_names": names} if names else {}


def sub_folders(dirs: list[Path]) -> list[str]:
    """The sorted names of the sub-folders of `dirs` (the class folders of a folder-per-class layout)."""
    return sorted({entry.name for folder in dirs for entry in os.scandir(folder) if entry.is_dir()})


def files_under(folder: Path, suffixes: tuple[str, ...]) -> list[str]:
    """The files of `folder` and its sub-folders whose names end in one of `suffixes` (any case),
    in a stable order: sorted, folder by folder, so that a listing is the same on every host."""
    found: list[str] = []
    for root, subdirs, files in os.walk(folder):
        subdirs.sort()
        found.extend(os.path.join(root, name) for name in sorted(files) if name.lower().endswith(suffixes))
    return found


def check_num_classes(found: int, params: dict[str, Any], key: str, what: str) -> None:
    """The data's class count must equal `num_classes`; say which setting to change when not.
    A folder inputter's num_classes left out is the count found (set in `params` for its builder)."""
    expected = params.get("num_classes")
    if expected is None:
        params["num_classes"] = found
        return
    if found != expected:
        raise DslError(f"{key}: {what} but inputter.num_classes is {expected}; make them agree")


def data_rows(csv_path: Path, is_header: Callable[[list[str]], bool]) -> Iterator[tuple[int, list[str]]]:
    """(line, row) of every non-blank row of a CSV file; its first such row is left out when
    `is_header(row)` says it is a header (each CSV inputter knows what its header looks like)."""
    with open(csv_path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        first = True
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if first:
                first = False
                if is_header(row):
                    continue
            yield reader.line_num, row


GLOB_CHARACTERS = "*?["


def missing_sources(params: dict[str, Any], modes: tuple[str, ...] = MODES) -> list[tuple[tuple[str | int, ...], str]]:
    """(path below the inputter, value) of each data file or folder that `params` names for `modes`
    and that is not there: a path that does not exist, or a glob pattern that matches nothing.

    Only existence, read from the parameters alone and without opening a file: cheap enough for
    plain `validate` and for `dslrun run` before TensorFlow loads (a trial waited 20 s for a typo in
    a path). What the files hold is `validate --data`'s. Understands a path, a list of them, and
    {source, target} pairs (parallel_text)."""
    found: list[tuple[tuple[str | int, ...], str]] = []

    def visit(value: Any, at: tuple[str | int, ...]) -> None:
        if isinstance(value, str):
            if not _exists(value):
                found.append((at, value))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                visit(item, at + (index,))
        elif isinstance(value, dict):
            for key in ("source", "target"):
                visit(value.get(key), at + (key,))

    for mode in modes:
        visit(params.get(mode), (mode,))
    return found


def _exists(value: str) -> bool:
    path = os.path.expanduser(value)
    if any(character in path for character in GLOB_CHARACTERS):
        return bool(glob.glob(path))
    return os.path.exists(path)
