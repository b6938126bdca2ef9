"""`lr_logger`: the learning rate over time, in the metrics file and in TensorBoard.

Useful to check a schedule (warmup, step decay) without TensorBoard's other scalars;
`train_summary` already writes `train/learning_rate` with the other outputs.
"""

from __future__ import annotations

from typing import Any

from dsl.callbacks._common import Cadence, every_n_iters_param
from dsl.callbacks.summary import write_scalars
from dsl.engine.hooks import Callback
from dsl.language.registry import register


def current_learning_rate(runner: Any) -> float:
    """The rate the last step used: the runner's output, else the optimizer's current value."""
    if "learning_rate" in runner.outputs:
        return float(runner.outputs["learning_rate"])
    return float(runner.optimizer.learning_rate)


@register(
    "callback",
    "lr_logger",
    params={
        "every_n_iters": every_n_iters_param(100, "Record the learning rate"),
        "tensorboard": {
            "description": "Also write the rate to TensorBoard as train/learning_rate.",
            "type": "boolean",
            "default": True,
        },
    },
    unique=True,
)
class LrLogger(Callback):
    """Record the learning rate every few steps in the metrics file and TensorBoard (train/learning_rate)."""

    priority = "LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self._cadence = Cadence(self.params["every_n_iters"], runner.step)

    def after_train_iter(self, runner: Any) -> None:
        if not self._cadence.advance(runner.step):
            return
        rate = {"learning_rate": current_learning_rate(runner)}
        runner.log_metrics("train", rate)
        if self.params["tensorboard"]:
            write_scalars(runner, "train", "train", rate)
