"""The learning rate as a function of the optimizer step: a warmup, then one decay rule.

The YAML speaks in epochs; `build_schedule` turns them into steps once the number of train
steps per epoch is known, and the schedule itself only counts steps. It is one Keras
`LearningRateSchedule` with a plain `get_config`, registered as `dslrun>LearningRate`, so an
optimizer that uses it can be serialised and rebuilt.

Imports TensorFlow: import this module only inside functions of the public modeler module.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import tensorflow as tf

from dsl.errors import DslError

KINDS = ("constant", "piecewise", "cosine", "exponential")


@tf.keras.utils.register_keras_serializable(package="dslrun")
class LearningRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`base_learning_rate` times a factor of the step.

    During the first `warmup_steps` the factor rises linearly from `warmup_start_factor` to 1.
    After that: `constant` keeps 1; `piecewise` uses `values[i]` once `boundaries[i-1]` steps
    are done (boundaries count from step 0, as Goyal et al. and Lambda do); `cosine` and
    `exponential` decay from 1, starting when the warmup ends, so the rate is continuous.
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


def build_schedule(
    config: dict[str, Any], base_learning_rate: float, steps_per_epoch: int | None, total_steps: int | None
) -> LearningRate:
    """The `modeler.lr_schedule` section (defaults filled) as a schedule of optimizer steps.

    `total_steps` is the length of the whole run; a cosine schedule without `decay_epochs`
    decays over it (after the warmup).
    """
    kind = config["type"]
    to_steps = _epochs_to_steps(steps_per_epoch, kind)
    warmup_steps = to_steps(config.get("warmup_epochs") or 0, "warmup_epochs")
    if config.get("warmup_epochs") and warmup_steps == 0:
        warmup_steps = 1
    settings: dict[str, Any] = {
        "warmup_steps": warmup_steps,
        "warmup_start_factor": config.get("warmup_start_factor", 0.0),
    }
    if kind == "piecewise":
        _check_piecewise(config["boundaries"], config["values"])
        settings["boundaries"] = [to_steps(b, "boundaries") for b in config["boundaries"]]
        settings["values"] = config["values"]
    elif kind == "cosine":
        settings["decay_steps"] = _cosine_decay_steps(config, to_steps, warmup_steps, total_steps)
        settings["alpha"] = config.get("alpha", 0.0)
    elif kind == "exponential":
        settings["decay_steps"] = max(to_steps(config["decay_epochs"], "decay_epochs"), 1)
        settings["decay_rate"] = config.get("decay_rate", 0.1)
        settings["staircase"] = config.get("staircase", False)
    return LearningRate(base_learning_rate, kind, **settings)


def _epochs_to_steps(steps_per_epoch: int | None, kind: str) -> Any:
    """A converter from epochs to whole steps, or a clear error when epochs have no length."""

    def to_steps(epochs: float, key: str) -> int:
        if not epochs:
            return 0
        if not steps_per_epoch:
            raise DslError(
                f"modeler.lr_schedule.{key}: the {kind} schedule is given in epochs, but the number of "
                "train steps per epoch is unknown (the inputter cannot count its train examples); "
                "use a constant schedule without warmup, or an inputter that knows its size"
            )
        return round(float(epochs) * steps_per_epoch)

    return to_steps


def _check_piecewise(boundaries: list[float], values: list[float]) -> None:
    if len(values) != len(boundaries) + 1:
        raise DslError(
            f"modeler.lr_schedule.values: a piecewise schedule with {len(boundaries)} boundaries needs "
            f"{len(boundaries) + 1} values (one factor before, between and after them), got {len(values)}"
        )
    if any(later <= earlier for earlier, later in itertools.pairwise(boundaries)):
        raise DslError(f"modeler.lr_schedule.boundaries: must be strictly increasing epochs, got {boundaries}")


def _cosine_decay_steps(config: dict[str, Any], to_steps: Any, warmup_steps: int, total_steps: int | None) -> int:
    """Steps the cosine takes from 1 to `alpha`: `decay_epochs`, or what the run has after the warmup."""
    if config.get("decay_epochs"):
        return max(to_steps(config["decay_epochs"], "decay_epochs"), 1)
    if not total_steps:
        raise DslError(
            "modeler.lr_schedule.decay_epochs: null means 'decay over the whole run', but the run's length "
            "in steps is unknown; set decay_epochs, or runner.max_iters"
        )
    if total_steps <= warmup_steps:
        raise DslError(
            f"modeler.lr_schedule.warmup_epochs: the warmup ({warmup_steps} steps) is as long as the whole run "
            f"({total_steps} steps), so the cosine has no steps left; shorten the warmup or set decay_epochs"
        )
    return total_steps - warmup_steps
