"""A network's two groups of layers for transfer learning: its `head` and its `backbone`.

The head is what depends on the task — the layers whose weights are shaped by the number
of classes — and the backbone everything else (Model Garden's `init_checkpoint_modules:
backbone`). `init_checkpoint` resets the head when the classes change and accepts `head`
and `backbone` in its `skip` and `trainable` lists; `dslrun show --variables` marks them.

A network declares its head with `declare_head(model, layer_names)`; one that does not
(a plug-in, say) has the layer named `logits` (dslrun's networks) or `predictions`
(tf.keras.applications) as its head, else its last layer with weights. Pure Python at
import time.
"""

from __future__ import annotations

import weakref
from typing import Any

GROUPS = ("head", "backbone")

# Kept beside the model rather than as an attribute of it: Keras tracks a model's attributes,
# and an attribute would become part of its checkpoints.
_DECLARED: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
_CONVENTIONAL = ("logits", "predictions")


def declare_head(model: Any, layer_names: list[str]) -> Any:
    """Record the layers (by name) that make `model`'s head; returns `model` for chaining."""
    _DECLARED[model] = tuple(layer_names)
    return model


def head_layer_names(model: Any) -> tuple[str, ...]:
    """The names of `model`'s head layers (see the module's docstring for the default)."""
    if model in _DECLARED:
        return _DECLARED[model]
    weighted = [layer for layer in model.layers if layer.weights]
    named = tuple(layer.name for layer in weighted if layer.name in _CONVENTIONAL)
    return named or ((weighted[-1].name,) if weighted else ())


def head_variable_names(model: Any) -> set[str]:
    """The variable names (`logits/kernel`) of the head's layers."""
    names = set(head_layer_names(model))
    return {v.name.rsplit(":", 1)[0] for layer in model.layers if layer.name in names for v in layer.weights}


# model -> the variables a fine-tuning froze (init_checkpoint's trainable / freeze_batch_norm)
_FROZEN: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def mark_frozen(model: Any, variables: list[Any]) -> None:
    """Record `variables` as trainable weights a fine-tuning froze (not frozen by the network's design)."""
    known = _FROZEN.setdefault(model, [])
    known.extend(v for v in variables if not any(v is k for k in known))


def frozen_for_fine_tuning(model: Any) -> list[Any]:
    """The weights `mark_frozen` recorded for `model`: the L2 term counts them as if they trained,
    so the loss does not depend on what a fine-tuning freezes."""
    return list(_FROZEN.get(model, []))
