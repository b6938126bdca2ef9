"""`tf.train.Example` parsed without TensorFlow, for `dslrun validate --data`.

Importing TensorFlow's own `example_pb2` would import all of TensorFlow (several seconds);
the message layout is small and frozen, so it is declared here for the protobuf library
TensorFlow already depends on. `Features.feature` is a map on the wire, which is the same
bytes as a repeated (key, value) entry message, the form declared here.
"""

from __future__ import annotations

import functools
from typing import Any

_BYTES, _FLOAT, _INT64, _MESSAGE, _STRING = 12, 2, 3, 11, 9
_OPTIONAL, _REPEATED = 1, 3

# message -> [(field, number, type, label, message type)]
_LAYOUT: dict[str, list[tuple[str, int, int, int, str]]] = {
    "BytesList": [("value", 1, _BYTES, _REPEATED, "")],
    "FloatList": [("value", 1, _FLOAT, _REPEATED, "")],
    "Int64List": [("value", 1, _INT64, _REPEATED, "")],
    "Feature": [
        ("bytes_list", 1, _MESSAGE, _OPTIONAL, "BytesList"),
        ("float_list", 2, _MESSAGE, _OPTIONAL, "FloatList"),
        ("int64_list", 3, _MESSAGE, _OPTIONAL, "Int64List"),
    ],
    "FeatureEntry": [("key", 1, _STRING, _OPTIONAL, ""), ("value", 2, _MESSAGE, _OPTIONAL, "Feature")],
    "Features": [("feature", 1, _MESSAGE, _REPEATED, "FeatureEntry")],
    "Example": [("features", 1, _MESSAGE, _OPTIONAL, "Features")],
}


@functools.lru_cache(maxsize=1)
def example_class() -> Any:
    """The message class of `tf.train.Example` (wire-compatible)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="dslrun_example.proto", package="dslrun", syntax="proto3")
    for name, fields in _LAYOUT.items():
        message = file.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            entry = message.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = f".dslrun.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("dslrun.Example"))


def parse_features(record: bytes) -> dict[str, Any]:
    """{feature name: list of its values} of one serialized Example (bytes, floats or ints)."""
    example = example_class().FromString(record)
    features: dict[str, Any] = {}
    for entry in example.features.feature:
        kind = _kind(entry.value)
        features[entry.key] = list(getattr(entry.value, kind).value) if kind else []
    return features


def _kind(feature: Any) -> str | None:
    for kind in ("bytes_list", "int64_list", "float_list"):
        if feature.HasField(kind):
            return kind
    return None
