"""Freezing a model's layers by variable-name patterns (fine-tuning only part of a network).

The granularity is the leaf layer (a layer holding no other layer): a leaf layer stays
trainable when at least one of its variables matches a pattern, and is frozen
(`layer.trainable = False`) otherwise. Keras also runs frozen BatchNormalization layers
in inference mode (moving statistics are kept), which is what fine-tuning wants.
Imports TensorFlow: import this module inside functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import tensorflow as tf

from dsl.callbacks._pretrained import variable_name
from dsl.errors import DslError


class Matcher(Protocol):
    """A compiled pattern, or a group (dsl.callbacks._restore_plan.Selector)."""

    pattern: Any

    def search(self, name: str) -> Any: ...


def _is_layer(module: tf.Module) -> bool:
    return isinstance(module, tf.keras.layers.Layer)


def leaf_layers(model: tf.keras.Model) -> list[tf.keras.layers.Layer]:
    """The model's layers that hold no other layer (in no particular order)."""
    layers = [m for m in model.submodules if _is_layer(m)]
    return [layer for layer in layers if not any(_is_layer(m) for m in layer.submodules)]


def freeze_unmatched(model: tf.keras.Model, patterns: Sequence[Matcher]) -> list[str]:
    """Freeze every leaf layer none of whose variables matches `patterns`; the frozen layers' names."""
    leaves = [layer for layer in leaf_layers(model) if layer.weights]
    keep = [layer for layer in leaves if any(p.search(variable_name(v)) for v in layer.weights for p in patterns)]
    if not keep:
        examples = ", ".join(variable_name(v) for v in model.weights[:4])
        raise DslError(
            f"init_checkpoint.trainable {[p.pattern for p in patterns]} matches no variable of the model, "
            f"so nothing would train; variable names look like: {examples}"
        )
    frozen = [layer for layer in leaves if layer not in keep]
    for layer in frozen:
        layer.trainable = False
    return [layer.name for layer in frozen]
