"""`modeler.optimizer`: the optimizers a pipeline can name, their settings, and the Keras optimizer.

Shared by every modeler (classification now, segmentation and text next): a modeler lists
`optimizer_param()` among its parameters, fills its section with `fill_optimizer` and builds
the optimizer with `build_optimizer`. TensorFlow is imported inside `build_optimizer` only,
so the tables can be read by `dslrun validate`.
"""

from __future__ import annotations

from typing import Any

from dsl.modelers._typed import KeyTable, fill_typed, typed_param

DEFAULT_OPTIMIZER = "momentum"

OPTIMIZERS: dict[str, str] = {
    "sgd": "plain gradient descent",
    "momentum": "gradient descent with momentum",
    "nesterov": "gradient descent with Nesterov momentum",
    "adam": "Adam",
    "adamw": "Adam with decoupled weight decay",
    "rmsprop": "RMSprop",
}

_UNIT = {"type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0}
_SGD_LIKE, _ADAM_LIKE = ("sgd", "momentum", "nesterov"), ("adam", "adamw")

OPTIMIZER_KEYS: KeyTable = {
    "learning_rate": (
        {
            "description": (
                "Base learning rate, before the schedule's factor and the backend's scaling "
                "(default 0.1 for sgd, momentum and nesterov; 0.001 for adam, adamw and rmsprop)."
            ),
            "type": "number",
            "exclusiveMinimum": 0.0,
        },
        {**dict.fromkeys(_SGD_LIKE, 0.1), **dict.fromkeys((*_ADAM_LIKE, "rmsprop"), 0.001)},
    ),
    "momentum": (
        {"description": "Momentum of the update (default 0.9; rmsprop: 0.0).", **_UNIT},
        {"momentum": 0.9, "nesterov": 0.9, "rmsprop": 0.0},
    ),
    "beta_1": (
        {"description": "Decay rate of the running mean of gradients (adam, adamw).", **_UNIT},
        dict.fromkeys(_ADAM_LIKE, 0.9),
    ),
    "beta_2": (
        {"description": "Decay rate of the running mean of squared gradients (adam, adamw).", **_UNIT},
        dict.fromkeys(_ADAM_LIKE, 0.999),
    ),
    "epsilon": (
        {
            "description": "Small constant added to the denominator for stability (adam, adamw, rmsprop).",
            "type": "number",
            "exclusiveMinimum": 0.0,
        },
        dict.fromkeys((*_ADAM_LIKE, "rmsprop"), 1e-7),
    ),
    "rho": (
        {"description": "Decay rate of the running mean of squared gradients (rmsprop).", **_UNIT},
        {"rmsprop": 0.9},
    ),
    "weight_decay": (
        {
            "description": (
                "AdamW's decoupled weight decay (times the learning rate, each step); it skips the "
                "variables matched by skip_l2_loss_vars (adamw only)."
            ),
            "type": "number",
            "minimum": 0.0,
        },
        {"adamw": 0.004},
    ),
    "clipnorm": (
        {
            "description": "Clip each variable's gradient to this L2 norm before the update; null = no clipping.",
            "type": ["number", "null"],
            "exclusiveMinimum": 0.0,
        },
        dict.fromkeys(OPTIMIZERS, None),
    ),
}


def optimizer_param(default_type: str = DEFAULT_OPTIMIZER) -> dict[str, Any]:
    """The `optimizer` parameter of a modeler: its schema, and `default_type` with its defaults."""
    return typed_param("optimizer", "The optimizer and its settings.", OPTIMIZERS, default_type, OPTIMIZER_KEYS)


def fill_optimizer(config: dict[str, Any] | None, default_type: str = DEFAULT_OPTIMIZER) -> dict[str, Any]:
    """`modeler.optimizer` with its type's defaults filled (a modeler built without the language)."""
    return fill_typed("optimizer", config, OPTIMIZERS, default_type, OPTIMIZER_KEYS)


def build_optimizer(config: dict[str, Any], learning_rate: Any, skip_weight_decay: list[str]) -> Any:
    """A fresh optimizer for the `optimizer` section (defaults filled).

    `skip_weight_decay` are the modeler's `skip_l2_loss_vars` patterns: AdamW's decoupled
    decay skips the same variables (normalisation weights, biases) as the L2 loss does.
    """
    import tensorflow as tf

    kind = config["type"]
    common = {"learning_rate": learning_rate, "clipnorm": config.get("clipnorm")}
    if kind in ("sgd", "momentum", "nesterov"):
        momentum = 0.0 if kind == "sgd" else config["momentum"]
        return tf.keras.optimizers.SGD(momentum=momentum, nesterov=kind == "nesterov", **common)
    if kind == "adam":
        return tf.keras.optimizers.Adam(
            beta_1=config["beta_1"], beta_2=config["beta_2"], epsilon=config["epsilon"], **common
        )
    if kind == "adamw":
        optimizer = tf.keras.optimizers.AdamW(
            weight_decay=config["weight_decay"],
            beta_1=config["beta_1"],
            beta_2=config["beta_2"],
            epsilon=config["epsilon"],
            **common,
        )
        optimizer.exclude_from_weight_decay(var_names=list(skip_weight_decay))
        return optimizer
    if kind == "rmsprop":
        return tf.keras.optimizers.RMSprop(
            rho=config["rho"], momentum=config["momentum"], epsilon=config["epsilon"], **common
        )
    raise ValueError(f"unknown optimizer type {kind!r}")
