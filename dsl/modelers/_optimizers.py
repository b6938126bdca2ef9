"""`modeler.optimizer` as a Keras 2.15 optimizer.

Imports TensorFlow: import this module only inside functions of the public modeler module.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def build_optimizer(config: dict[str, Any], learning_rate: Any, skip_weight_decay: list[str]) -> Any:
    """A fresh optimizer for the `optimizer` section (defaults filled).

    `skip_weight_decay` are the modeler's `skip_l2_loss_vars` patterns: AdamW's decoupled
    decay skips the same variables (normalisation weights, biases) as the L2 loss does.
    """
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
