"""`tfrecord`: tf.train.Example records holding an encoded image and an integer label.

The feature names default to those of TF-Slim and the TF Model Garden
(`image/encoded`, `image/class/label`). Records are counted when the pipeline is built by
walking the record headers in Python (no TensorFlow, no decoding), so steps per epoch are
known; sharding is per record, before shuffling, like every other inputter.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    COMMON_PARAMS,
    MODES,
    NUM_CLASSES_PARAM,
    as_list,
    expand_globs,
    image_shape_param,
    source_params,
)
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a TFRecord file or glob pattern (e.g. data/train-*.tfrecord)", {"type": "string", "minLength": 1}),
    "num_classes": NUM_CLASSES_PARAM,
    "image_shape": image_shape_param(),
    "image_key": {
        "description": "Feature holding the encoded image file (PNG, JPEG, BMP or GIF).",
        "type": "string",
        "minLength": 1,
        "default": "image/encoded",
    },
    "label_key": {
        "description": "Feature holding the integer (int64) class label.",
        "type": "string",
        "minLength": 1,
        "default": "image/class/label",
    },
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """The records of `mode` for `dslrun validate --data`, parsed without TensorFlow."""
    from dsl.data_check.examples import Problem, Split

    key = f"inputter.{mode}"
    try:
        files = expand_globs(as_list(params[mode]), key)
    except DslError as exc:
        return Split([Problem(str(exc))], source=", ".join(as_list(params[mode])))
    return Split(_examples(files, key, params), source=f"{len(files)} TFRecord file{'s' * (len(files) != 1)}")


def _examples(files: list[Path], key: str, params: dict[str, Any]) -> Iterator[Any]:
    from dsl.data_check.examples import Example, Problem
    from dsl.language.diagnostics import Location
    from dsl.tasks.image_classification._example_proto import parse_features

    image_key, label_key, classes = params["image_key"], params["label_key"], params["num_classes"]
    for path in files:
        where = Location(str(path))
        try:
            for number, record in enumerate(read_records(path, key), start=1):
                try:
                    features = parse_features(record)
                except Exception as exc:  # protobuf's DecodeError, or worse
                    yield Problem(f"record {number} is not a tf.train.Example ({type(exc).__name__})", where)
                    continue
                image, label = features.get(image_key) or [b""], features.get(label_key) or [None]
                if not isinstance(label[0], int) or not 0 <= label[0] < classes:
                    yield Problem(f"record {number}: label {label[0]} (feature {label_key!r}) is outside "
                                  f"0..{classes - 1}; set inputter.label_key or inputter.num_classes", where)
                    continue
                origin = f"{path.name} record {number}"
                if not isinstance(image[0], bytes) or not image[0]:
                    yield Problem(f"record {number} has no (or an empty) feature {image_key!r}; set inputter.image_key "
                                  "to the feature holding the encoded image", where)
                    continue
                yield Example(label[0], origin, where, data=image[0])
        except DslError as exc:
            yield Problem(str(exc).removeprefix(f"{key}: "), where)


def read_records(path: Path, key: str) -> Iterator[bytes]:
    """The records of one uncompressed TFRecord file (their checksums are not verified)."""
    header = struct.Struct("<QI")  # data length, masked CRC of the length
    with open(path, "rb") as handle:
        if handle.read(2) == b"\x1f\x8b":
            raise DslError(f"{key}: {path} is gzip-compressed; decompress it (compressed TFRecords are not supported)")
        handle.seek(0)
        size, count = path.stat().st_size, 0
        while raw := handle.read(header.size):
            length = header.unpack(raw)[0] if len(raw) == header.size else None
            fits = length is not None and handle.tell() + length + 4 <= size  # before reading a bogus length
            data = handle.read(length) if fits else b""
            if not fits or len(handle.read(4)) < 4:
                raise DslError(f"{key}: {path} is truncated or not a TFRecord file (record {count + 1} runs past "
                               "the end); write it again")
            count += 1
            yield data


@register("inputter", "tfrecord", params=PARAMS, required=("num_classes",), examples=examples, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """tf.train.Example records (encoded image file + int64 label) in TFRecord files.

    Find and count the records of every declared mode now; they are parsed while training.
    """
    from dsl.tasks.image_classification._readers import TFRecordInputter

    files = {mode: expand_globs(as_list(params[mode]), f"inputter.{mode}") for mode in MODES if params[mode] is not None}
    counts = {mode: sum(count_records(path, f"inputter.{mode}") for path in paths) for mode, paths in files.items()}
    for mode, count in counts.items():
        if count == 0:
            raise DslError(f"inputter.{mode}: {', '.join(map(str, files[mode]))} hold(s) no records")
    return TFRecordInputter(params, files, counts)


def count_records(path: Path, key: str) -> int:
    """Records in one uncompressed TFRecord file, from its length headers alone."""
    header = struct.Struct("<QI")  # data length, masked CRC of the length
    count = 0
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if handle.read(2) == b"\x1f\x8b":
            raise DslError(f"{key}: {path} is gzip-compressed; decompress it (compressed TFRecords are not supported)")
        handle.seek(0)
        position = 0
        while position < size:
            raw = handle.read(header.size)
            length = header.unpack(raw)[0] if len(raw) == header.size else None
            position += header.size + (length or 0) + 4
            if length is None or position > size:
                raise DslError(
                    f"{key}: {path} is truncated or not a TFRecord file (record {count + 1} runs past the end); "
                    "write it again"
                )
            handle.seek(position)
            count += 1
    return count
