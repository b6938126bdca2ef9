"""Pretrained weights from a file, paired with the variables of a live model.

Two sources:
- a checkpoint written by dslrun (a `tf.train.Checkpoint` holding the model under `model`):
  read by variable name (`conv_1/kernel`), which its object graph records beside each
  positional key, so a checkpoint of another network never fills the wrong layers;
- a Keras weights file: `model.save_weights("x.h5")` (by the weight names it stores) or
  `"x.weights.h5"` (paired by the names that format files layers under).

Nothing is assigned here: the caller matches names, skips and shapes first, so that an
error leaves the model untouched. Imports TensorFlow: import this module inside functions only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from dsl.engine.checkpoint_paths import named_prefix
from dsl.language.errors import DslError

Pair = tuple[tf.Variable, np.ndarray]

_KEY = "init_checkpoint.path"


def variable_name(variable: tf.Variable) -> str:
    """`logits/kernel` for the variable `logits/kernel:0`: the name `skip` / `trainable` patterns see."""
    return str(variable.name).rsplit(":", 1)[0]


def resolve(path: str) -> str:
    """The checkpoint prefix or weights file that `path` designates, or an error saying what is accepted."""
    given = Path(path)
    if given.name.endswith(".h5"):
        if given.is_file():
            return str(given)
    elif given.is_dir():
        for directory in (given, given / "checkpoints"):
            latest = tf.train.latest_checkpoint(str(directory))
            if latest:
                return str(latest)
        raise DslError(
            f"{_KEY}: the directory {path!r} holds no checkpoint (no `checkpoint` file); give a run "
            f"directory, its checkpoints/ or best/ directory, or a checkpoint prefix such as .../ckpt-100"
        )
    elif Path(f"{named_prefix(path)}.index").is_file():
        return named_prefix(path)
    raise DslError(
        f"{_KEY}: {path!r} does not exist; expected a dslrun run directory (runs/<name>, or its "
        f"checkpoints/ or best/), a checkpoint prefix such as runs/<name>/checkpoints/ckpt-100, "
        f"or a Keras .h5 / .weights.h5 weights file"
    )


def read_stored(model: tf.keras.Model | None, path: str) -> dict[str, np.ndarray]:
    """The file's model variables by name (`conv_1/kernel`), as the file itself names them.

    A checkpoint's object graph records each variable's own name beside its positional key
    (`model/layer_with_weights-0/kernel`), and a legacy `.h5` file its weight names: both
    are read by name, so a file of another network can never land in the wrong layers.
    Only the `.weights.h5` format stores no names; it is paired as Keras pairs it (`model`
    needed), by layer class and order.
    """
    if path.endswith(".weights.h5") and model is not None and not _is_legacy_h5(path):
        return {variable_name(variable): value for variable, value in _h5_pairs(model, path)}
    if path.endswith(".h5"):
        return _legacy_named(path)
    return _checkpoint_named(path)


def read_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """The file's model variables by name with their shapes, read without any model (a
    checkpoint's index only: the values are not read). For `dslrun show --variables`."""
    if path.endswith(".h5"):
        return {name: tuple(value.shape) for name, value in read_stored(None, path).items()}
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    return {name: tuple(shapes[key]) for name, key in _checkpoint_keys(reader, path).items()}


def _checkpoint_keys(reader: Any, prefix: str) -> dict[str, str]:
    """Variable name -> checkpoint key, for the variables under the checkpoint's `model` entry."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    root = next((c.node_id for c in graph.nodes[0].children if c.local_name == "model"), None)
    if root is None:
        names = ", ".join(c.local_name for c in graph.nodes[0].children)
        raise DslError(
            f"{_KEY}: {prefix!r} has no `model` entry (it holds: {names}); give a checkpoint written "
            f"by dslrun, or Keras weights saved with model.save_weights('x.h5')"
        )
    keys: dict[str, str] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE":
                name = attribute.full_name.rsplit(":", 1)[0] or attribute.checkpoint_key
                keys.setdefault(name, attribute.checkpoint_key)
        # Reversed, so that variables come out in the network's order (messages list them).
        stack.extend(c.node_id for c in reversed(node.children))
    return keys


def _checkpoint_named(prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(key) for name, key in _checkpoint_keys(reader, prefix).items()}


def _is_legacy_h5(path: str) -> bool:
    import h5py

    with h5py.File(path, "r") as handle:
        return "layer_names" in handle.attrs or "model_weights" in handle


def _legacy_named(path: str) -> dict[str, np.ndarray]:
    """`save_weights("x.h5")`: every layer's weights under their own names (`conv/kernel:0`)."""
    import h5py

    with h5py.File(path, "r") as handle:
        if not ("layer_names" in handle.attrs or "model_weights" in handle):
            raise DslError(
                f"{_KEY}: {path!r} is not a Keras weights file with weight names (no layer_names in it); "
                f"save it with model.save_weights('x.h5'), or name it x.weights.h5 if Keras wrote that format"
            )
        group = handle.get("model_weights", handle)
        named: dict[str, np.ndarray] = {}
        for layer_name in _text(group.attrs["layer_names"]):
            layer_group = group[layer_name]
            for weight in _text(layer_group.attrs["weight_names"]):
                named[weight.rsplit(":", 1)[0]] = np.asarray(layer_group[weight])
        return named


def _h5_pairs(model: tf.keras.Model, path: str) -> list[Pair]:
    import h5py

    with h5py.File(path, "r") as handle:
        if "layers" in handle:
            return _by_name_pairs(model, handle["layers"], path)
    raise DslError(f"{_KEY}: {path!r} is not a Keras weights file (no layer_names or layers in it)")


def _text(names: Any) -> list[str]:
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def _keras_path_name(layer: tf.keras.layers.Layer) -> str:
    """The name Keras' `.weights.h5` format files a layer under: its class in snake case."""
    name = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", type(layer).__name__)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    return name if not name.startswith("_") else f"private{name}"


def _by_name_pairs(model: tf.keras.Model, group: Any, path: str) -> list[Pair]:
    """`save_weights("x.weights.h5")`: layers/<class>[_<n>]/vars/<i>, as Keras files `model.layers`."""
    pairs: list[Pair] = []
    used: dict[str, int] = {}
    for layer in model.layers:
        name = _keras_path_name(layer)
        used[name] = used.get(name, -1) + 1
        name = f"{name}_{used[name]}" if used[name] else name
        if name not in group or not layer.weights:
            continue
        layer_group = group[name]
        if isinstance(layer, tf.keras.Model) and "layers" in layer_group:
            pairs.extend(_by_name_pairs(layer, layer_group["layers"], path))
            continue
        stored = layer_group.get("vars", {})
        if len(stored) != len(layer.weights):
            raise DslError(
                f"{_KEY}: cannot pair the weights of layer {layer.name} with {path!r} "
                f"({len(stored)} stored under {name}, {len(layer.weights)} in the model); save the "
                f"weights with model.save_weights('x.h5') or use a dslrun checkpoint"
            )
        pairs.extend((v, np.asarray(stored[str(i)])) for i, v in enumerate(layer.weights))
    return pairs
