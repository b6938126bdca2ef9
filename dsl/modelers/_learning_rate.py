"""The learning rate as a Keras schedule of the optimizer step: a warmup, then one decay rule.

One `LearningRateSchedule` with a plain `get_config`, registered as `dslrun>LearningRate`,
so an optimizer that uses it can be serialised and rebuilt. It only counts steps:
`dsl.modelers._schedules.build_schedule` turns the YAML's epochs into steps.

Imports TensorFlow: import this module only inside functions.
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

KINDS = ("constant", "piecewise", "cosine", "exponential", "inverse_sqrt")


@tf.keras.utils.register_keras_serializable(package="dslrun")
class LearningRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`base_learning_rate` times a factor of the step.

    During the first `warmup_steps` the factor rises linearly from `warmup_start_factor` to 1.
    After that: `constant` keeps 1; `piecewise` uses `values[i]` once `boundaries[i-1]` steps
    are done (boundaries count from step 0, as Goyal et al. and Lambda do); `cosine`,
    `exponential` and `inverse_sqrt` decay from 1, starting when the warmup ends, so the rate is continuous.
    """

    def __init__(
        self,
        base_learning_rate: float,
        kind: str = "constant",
        boundaries: list[int] | tuple[int, ...] = (),
        values: list[float] | tuple[float, ...] = (1.0,),
        decay_steps: int = 1,
        alpha: float = 0.0,
        decay_rate: float = 0.1,
        staircase: bool = False,
        warmup_steps: int = 0,
        warmup_start_factor: float = 0.0,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown schedule kind {kind!r}; expected one of {', '.join(KINDS)}")
        self.base_learning_rate = float(base_learning_rate)
        self.kind = kind
        self.boundaries = [int(b) for b in boundaries]
        self.values = [float(v) for v in values]
        self.decay_steps = max(int(decay_steps), 1)
        self.alpha = float(alpha)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)
        self.warmup_steps = int(warmup_steps)
        self.warmup_start_factor = float(warmup_start_factor)

    def __call__(self, step: Any) -> Any:
        step = tf.cast(step, tf.float32)
        factor = self._decay_factor(step)
        if self.warmup_steps > 0:
            progress = step / float(self.warmup_steps)
            warmup = self.warmup_start_factor + (1.0 - self.warmup_start_factor) * progress
            factor = tf.where(step < float(self.warmup_steps), warmup, factor)
        return tf.multiply(self.base_learning_rate, factor, name="learning_rate")

    def _decay_factor(self, step: Any) -> Any:
        if self.kind == "piecewise":
            passed = tf.reduce_sum(tf.cast(step >= tf.constant(self.boundaries, tf.float32), tf.int32))
            return tf.gather(tf.constant(self.values, tf.float32), passed)
        after_warmup = tf.maximum(step - float(self.warmup_steps), 0.0)
        if self.kind == "cosine":
            progress = tf.minimum(after_warmup / float(self.decay_steps), 1.0)
            cosine = 0.5 * (1.0 + tf.cos(math.pi * progress))
            return self.alpha + (1.0 - self.alpha) * cosine
        if self.kind == "inverse_sqrt":  # 1 where the warmup ends, then 1/sqrt(step): Vaswani et al.'s schedule
            return tf.sqrt(max(float(self.warmup_steps), 1.0) / tf.maximum(step, max(float(self.warmup_steps), 1.0)))
        if self.kind == "exponential":
            exponent = after_warmup / float(self.decay_steps)
            if self.staircase:
                exponent = tf.floor(exponent)
            return tf.pow(self.decay_rate, exponent)
        return tf.ones_like(step)

    def get_config(self) -> dict[str, Any]:
        return {
            "base_learning_rate": self.base_learning_rate,
            "kind": self.kind,
            "boundaries": list(self.boundaries),
            "values": list(self.values),
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "warmup_steps": self.warmup_steps,
            "warmup_start_factor": self.warmup_start_factor,
        }
