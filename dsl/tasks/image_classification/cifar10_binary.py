"""`cifar10_binary`: the official CIFAR-10 binary files, read with FixedLengthRecordDataset.

Each record is one label byte and 3072 pixel bytes (the R, G and B planes of a 32x32
image). train = data_batch_1..5.bin (50000 images), val and test = test_batch.bin (10000).
The binary format is used on purpose: nothing downloaded is ever unpickled.
`dslrun data cifar10 --out DIR --keep-binary` puts the files in DIR/cifar-10-batches-bin.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    COMMON_PARAMS,
    existing_dir,
    image_shape_param,
)
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.tasks.image_classification._cifar10_format import (
    BINARY_FOLDER,
    CHANNELS,
    CLASS_NAMES,
    HEIGHT,
    LABEL_BYTES,
    RECORD_BYTES,
    TEST_FILES,
    TRAIN_FILES,
    WIDTH,
)
from dsl.tasks.image_classification._host_files import binary_batches


def facts(params: dict[str, Any]) -> dict[str, Any]:
    """What the format fixes, for `dslrun validate`: its ten named classes."""
    return {"num_classes": len(CLASS_NAMES), "class_names": list(CLASS_NAMES)}

PARAMS: dict[str, dict[str, Any]] = {
    "data_dir": {
        "description": (
            "Folder holding data_batch_1.bin ... data_batch_5.bin and test_batch.bin (or their "
            "cifar-10-batches-bin sub-folder); relative to the directory dslrun is started from."
        ),
        "type": "string",
        "minLength": 1,
    },
    "image_shape": image_shape_param([HEIGHT, WIDTH, CHANNELS]),
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """The records of `mode` for `dslrun validate --data`: labels checked, pixels digested."""
    from dsl.data_check.examples import Problem, Split

    try:
        folder = find_batches(params["data_dir"])
    except DslError as exc:
        return Split([Problem(str(exc))], source=params["data_dir"])
    names = TRAIN_FILES if mode == "train" else TEST_FILES
    files = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    return Split(_records(folder, names), source=f"{files} in {folder}", class_names=CLASS_NAMES)


def _records(folder: Path, names: tuple[str, ...]) -> Iterator[Any]:
    from dsl.data_check.examples import Example, Problem
    from dsl.data_check.images import ImageFacts, digest_of
    from dsl.language.diagnostics import Location

    for name in names:
        path = folder / name
        try:
            _records_in(path)
        except DslError as exc:
            yield Problem(str(exc).removeprefix("inputter.data_dir: "), Location(str(path)))
            continue
        with open(path, "rb") as handle:
            for index in itertools.count():
                record = handle.read(RECORD_BYTES)
                if not record:
                    break
                where, origin = Location(str(path)), f"{name} record {index + 1}"
                if record[0] >= len(CLASS_NAMES):
                    yield Problem(f"record {index + 1}: label {record[0]} is outside 0..{len(CLASS_NAMES) - 1}", where)
                    continue
                facts = ImageFacts(WIDTH, HEIGHT, "RGB", CHANNELS, digest_of(record[LABEL_BYTES:]))
                yield Example(record[0], origin, where, facts=facts)


@register(
    "inputter",
    "cifar10_binary",
    facts=facts,
    params=PARAMS,
    required=("data_dir",),
    examples=examples,
    batch=("image", "class"),
    host_files=binary_batches,
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """CIFAR-10 from its official binary files (10 classes, 32x32 RGB; val and test = test_batch).

    Check the files and their sizes now; records are read while training.
    """
    from dsl.tasks.image_classification._readers import Cifar10Inputter

    folder = find_batches(params["data_dir"])
    files = {
        "train": [folder / name for name in TRAIN_FILES],
        "val": [folder / name for name in TEST_FILES],
        "test": [folder / name for name in TEST_FILES],
    }
    counts = {mode: sum(_records_in(path) for path in paths) for mode, paths in files.items()}
    return Cifar10Inputter(params, files, counts)


def find_batches(data_dir: str) -> Path:
    """The folder holding the .bin files: `data_dir` itself or its cifar-10-batches-bin."""
    folder = existing_dir(data_dir, "inputter.data_dir")
    if not (folder / TRAIN_FILES[0]).exists() and (folder / BINARY_FOLDER / TRAIN_FILES[0]).exists():
        folder = folder / BINARY_FOLDER
    missing = [name for name in (*TRAIN_FILES, *TEST_FILES) if not (folder / name).is_file()]
    if missing:
        raise DslError(
            f"inputter.data_dir: {folder} lacks {', '.join(missing)}; get the files with "
            "`dslrun data cifar10 --out DIR --keep-binary` and set data_dir: DIR"
        )
    return folder


def _records_in(path: Path) -> int:
    size = path.stat().st_size
    if size == 0 or size % RECORD_BYTES:
        raise DslError(
            f"inputter.data_dir: {path} has {size} bytes, not a positive multiple of the {RECORD_BYTES}-byte "
            "CIFAR-10 record; the file is truncated or not a CIFAR-10 binary batch, download it again"
        )
    return size // RECORD_BYTES
