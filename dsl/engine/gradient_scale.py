"""Per-variable gradient multipliers: a group's learning rate as a fraction of the optimizer's.

`init_checkpoint.backbone_lr_multiplier` fine-tunes a pretrained backbone slower than the
new head. Keras optimizers have one learning rate, so the train step multiplies each
listed variable's gradient instead: for sgd, momentum and nesterov that is exactly a
learning rate times the multiplier (the momentum accumulates the scaled gradients); an
adaptive optimizer (Adam, RMSProp) divides the scale out again, so the callback refuses
those. The multipliers are read when the train call is traced; whoever changes them calls
`runner.compile_calls()` to trace it again.
"""

from __future__ import annotations

import weakref
from typing import Any

# model -> {variable name: multiplier}; beside the model so Keras does not track it into checkpoints
_MULTIPLIERS: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()


def set_multipliers(model: Any, multipliers: dict[str, float]) -> None:
    """Scale the gradients of the variables named (`conv_1/kernel`) in `model`'s next traced step."""
    _MULTIPLIERS[model] = dict(multipliers)


def scale_gradients(model: Any, variables: list[Any], gradients: list[Any]) -> list[Any]:
    """`gradients` (of `variables`) with the multipliers set for `model` applied."""
    multipliers = _MULTIPLIERS.get(model)
    if not multipliers:
        return gradients
    names = [v.name.rsplit(":", 1)[0] for v in variables]
    return [g if g is None or name not in multipliers else g * multipliers[name] for name, g in zip(names, gradients)]
