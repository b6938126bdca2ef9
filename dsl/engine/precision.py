"""Mixed precision: float16 compute needs its loss scaled, bfloat16 and float32 do not.

`runner.precision` sets Keras' global policy before the network is built (see
dsl.engine.compiler). Under `mixed_float16` small gradients underflow float16, so the
optimizer is wrapped in Keras' `LossScaleOptimizer`: the loss is multiplied by a scale
before the gradient and the gradients are divided by it after (after Horovod's allreduce,
so every rank unscales the same sum), and the scale adapts — halved after a step with
non-finite gradients, which is then skipped, doubled after 2000 good steps. The scale and
its counter are training state: checkpointed with the optimizer, broadcast with it.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_LossScaleOptimizer = tf.keras.mixed_precision.LossScaleOptimizer


def with_loss_scaling(optimizer: Any) -> Any:
    """`optimizer`, wrapped in a dynamic loss scale when the policy computes in float16."""
    if tf.keras.mixed_precision.global_policy().compute_dtype == "float16":
        return _LossScaleOptimizer(optimizer)
    return optimizer


def loss_scale_variables(optimizer: Any) -> list[tf.Variable]:
    """The loss scale's own variables (current scale, good steps), [] without loss scaling.

    `optimizer.variables` of a LossScaleOptimizer lists only the wrapped optimizer's; these
    two are found through the checkpoint dependency graph, a public view of what it tracks.
    """
    if not isinstance(optimizer, _LossScaleOptimizer):
        return []
    view = tf.train.TrackableView(optimizer)
    state = view.children(optimizer)["loss_scale"]
    return [v for v in tf.train.TrackableView(state).descendants() if isinstance(v, tf.Variable)]


def scaled_loss(optimizer: Any, loss: tf.Tensor) -> tf.Tensor:
    """The loss to differentiate (inside the tape): `loss` times the loss scale, if any."""
    return optimizer.get_scaled_loss(loss) if isinstance(optimizer, _LossScaleOptimizer) else loss


def unscaled_gradients(optimizer: Any, gradients: list[tf.Tensor]) -> list[tf.Tensor]:
    """Gradients of `scaled_loss` brought back to the loss's scale (after any allreduce)."""
    if isinstance(optimizer, _LossScaleOptimizer):
        unscaled: list[tf.Tensor] = optimizer.get_unscaled_gradients(gradients)
        return unscaled
    return gradients
