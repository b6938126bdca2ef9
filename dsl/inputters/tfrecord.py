"""`tfrecord`: tf.train.Example records holding an encoded image and an integer label.

The feature names default to those of TF-Slim and the TF Model Garden
(`image/encoded`, `image/class/label`). Records are counted when the pipeline is built by
walking the record headers in Python (no TensorFlow, no decoding), so steps per epoch are
known; sharding is per record, before shuffling, like every other inputter.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from dsl.errors import DslError
from dsl.inputters._common import (
    COMMON_PARAMS,
    MODES,
    NUM_CLASSES_PARAM,
    as_list,
    expand_globs,
    image_shape_param,
    source_params,
    with_defaults,
)
from dsl.registry import register

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a TFRecord file or glob pattern (e.g. data/train-*.tfrecord)", {"type": "string", "minLength": 1}),
    "num_classes": NUM_CLASSES_PARAM,
    "image_shape": image_shape_param(),
    "image_key": {
        "description": "Feature holding the encoded PNG/JPEG bytes of the image.",
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


@register(
    "inputter",
    "tfrecord",
    params=PARAMS,
    required=("num_classes",),
    description="tf.train.Example records (encoded PNG/JPEG image + int64 label) in TFRecord files.",
)
def build(params: dict[str, Any], context: Any) -> Any:
    """Find and count the records of every declared mode now; they are parsed while training."""
    from dsl.inputters._readers import TFRecordInputter

    p = with_defaults(params, PARAMS)
    files = {mode: expand_globs(as_list(p[mode]), f"inputter.{mode}") for mode in MODES if p[mode] is not None}
    counts = {mode: sum(count_records(path, f"inputter.{mode}") for path in paths) for mode, paths in files.items()}
    for mode, count in counts.items():
        if count == 0:
            raise DslError(f"inputter.{mode}: {', '.join(map(str, files[mode]))} hold(s) no records")
    return TFRecordInputter(p, files, counts)


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
