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
from dsl.language.errors import DslError
from dsl.networks import mark_frozen


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


def unmatched_trainable(model: tf.keras.Model, patterns: Sequence[Matcher]) -> str | None:
    """Why `trainable` cannot be what was meant, or None: an entry that matches no variable (a
    misspelt layer would stay frozen while the others train, and nothing would say so)."""
    from dsl.networks import head_layer_names

    names = [variable_name(v) for v in model.weights]
    unused = [p.pattern for p in patterns if not any(p.search(name) for name in names)]
    if not unused:
        return None
    head = ", ".join(head_layer_names(model)) or "none declared"
    # Not "it trains nothing": the list's other entries still train (trial B15 read it as the whole list).
    return (f"init_checkpoint.trainable: {unused} match{'es' if len(unused) == 1 else ''} no variable of the model, so "
            f"the layers {'it was' if len(unused) == 1 else 'they were'} meant for would stay frozen; write `head` or "
            "`backbone`, or a regular "
            f"expression of variable names (the head's layers: {head}; `dslrun show --variables` lists every name)")


def freeze_unmatched(model: tf.keras.Model, patterns: Sequence[Matcher]) -> list[str]:
    """Freeze every leaf layer none of whose variables matches `patterns`; the frozen layers' names."""
    problem = unmatched_trainable(model, patterns)
    if problem:
        raise DslError(problem)
    leaves = [layer for layer in leaf_layers(model) if layer.weights]
    keep = [layer for layer in leaves if any(p.search(variable_name(v)) for v in layer.weights for p in patterns)]
    frozen = [layer for layer in leaves if layer not in keep]
    _freeze(model, frozen)
    return [layer.name for layer in frozen]


def _freeze(model: tf.keras.Model, layers: list[tf.keras.layers.Layer]) -> None:
    """Freeze `layers`, recording the weights that trained until now (the L2 term keeps counting them)."""
    mark_frozen(model, [v for layer in layers for v in layer.trainable_weights])
    for layer in layers:
        layer.trainable = False


def _is_batch_norm(layer: tf.keras.layers.Layer) -> bool:
    return isinstance(layer, tf.keras.layers.BatchNormalization) or "BatchNormalization" in type(layer).__name__


def freeze_batch_norm(model: tf.keras.Model) -> list[str]:
    """Freeze every batch normalisation layer (inference mode, nothing trained); their names."""
    layers = [layer for layer in leaf_layers(model) if _is_batch_norm(layer)]
    _freeze(model, layers)
    return [layer.name for layer in layers]


def unfreeze(model: tf.keras.Model, names: list[str], keep_batch_norm_frozen: bool = False) -> list[str]:
    """Make the leaf layers `names` (those `freeze_unmatched` froze) trainable again, batch
    normalisation too unless kept frozen; the names of those thawed. Layers a network built
    frozen stay so."""
    thawed = [layer for layer in leaf_layers(model) if layer.name in names and not layer.trainable
              and not (keep_batch_norm_frozen and _is_batch_norm(layer))]
    for layer in thawed:
        layer.trainable = True
    return [layer.name for layer in thawed]
