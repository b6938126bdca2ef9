"""Pretrained weights from a file, paired with the variables of a live model.

Two sources:
- a checkpoint written by dslrun (a `tf.train.Checkpoint` holding the model under `model`):
  its object graph is walked alongside the live model, child name by child name, so each
  stored value lands on the variable that sits at the same place in the network;
- a Keras weights file: `model.save_weights("x.h5")` (paired layer by layer in order, as
  Keras loads it) or `"x.weights.h5"` (paired by the names that format files layers under).

Nothing is assigned here: the caller checks skips and shapes first, so that an error
leaves the model untouched. Imports TensorFlow: import this module inside functions only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from dsl.errors import DslError

Pair = tuple[tf.Variable, np.ndarray]

_KEY = "init_checkpoint.path"


def variable_name(variable: tf.Variable) -> str:
    """`logits/kernel` for the variable `logits/kernel:0`: the name `skip` / `trainable` patterns see."""
    return variable.name.rsplit(":", 1)[0]


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
                return latest
        raise DslError(
            f"{_KEY}: the directory {path!r} holds no checkpoint (no `checkpoint` file); give a run "
            f"directory, its checkpoints/ or best/ directory, or a checkpoint prefix such as .../ckpt-100"
        )
    elif Path(f"{path}.index").is_file():
        return path
    raise DslError(
        f"{_KEY}: {path!r} does not exist; expected a dslrun run directory (runs/<name>, or its "
        f"checkpoints/ or best/), a checkpoint prefix such as runs/<name>/checkpoints/ckpt-100, "
        f"or a Keras .h5 / .weights.h5 weights file"
    )


def read_pairs(model: tf.keras.Model, path: str) -> list[Pair]:
    """(model variable, stored value) for every model variable the file holds."""
    if path.endswith(".h5"):
        return _h5_pairs(model, path)
    return _checkpoint_pairs(model, path)


def _checkpoint_pairs(model: tf.keras.Model, prefix: str) -> list[Pair]:
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    root = next((c.node_id for c in graph.nodes[0].children if c.local_name == "model"), None)
    if root is None:
        names = ", ".join(c.local_name for c in graph.nodes[0].children)
        raise DslError(
            f"{_KEY}: {prefix!r} has no `model` entry (it holds: {names}); give a checkpoint written "
            f"by dslrun, or Keras weights saved with model.save_weights('x.h5')"
        )
    pairs: list[Pair] = []
    seen: set[int] = set()
    stack: list[tuple[int, Any]] = [(root, model)]
    while stack:
        node_id, obj = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and isinstance(obj, tf.Variable):
                pairs.append((obj, reader.get_tensor(attribute.checkpoint_key)))
        if node.children:
            live = tf.train.TrackableView.children(obj)
            # Reversed, so that variables come out in the network's order (messages list them).
            stack.extend((c.node_id, live[c.local_name]) for c in reversed(node.children) if c.local_name in live)
    return pairs


def _h5_pairs(model: tf.keras.Model, path: str) -> list[Pair]:
    import h5py

    with h5py.File(path, "r") as handle:
        if "layer_names" in handle.attrs or "model_weights" in handle:
            group = handle.get("model_weights", handle)
            return _legacy_pairs(model, group, path)
        if "layers" in handle:
            return _by_name_pairs(model, handle["layers"], path)
    raise DslError(f"{_KEY}: {path!r} is not a Keras weights file (no layer_names or layers in it)")


def _text(names: Any) -> list[str]:
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def _legacy_pairs(model: tf.keras.Model, group: Any, path: str) -> list[Pair]:
    """`save_weights("x.h5")`: layers with weights, in order, as Keras' own `load_weights` pairs them."""
    stored = []
    for layer_name in _text(group.attrs["layer_names"]):
        layer_group = group[layer_name]
        values = [np.asarray(layer_group[w]) for w in _text(layer_group.attrs["weight_names"])]
        if values:
            stored.append(values)
    layers = [layer for layer in model.layers if layer.weights]
    if len(stored) != len(layers):
        raise DslError(
            f"{_KEY}: {path!r} has weights for {len(stored)} layers but the model has {len(layers)} "
            f"layers with weights; it was saved from another network"
        )
    pairs: list[Pair] = []
    for layer, values in zip(layers, stored):
        variables = layer.trainable_weights + layer.non_trainable_weights
        if len(variables) != len(values):
            raise DslError(
                f"{_KEY}: layer {layer.name} has {len(variables)} variables but {path!r} stores "
                f"{len(values)} for it; it was saved from another network"
            )
        pairs.extend(zip(variables, values))
    return pairs


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
