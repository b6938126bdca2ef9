"""`terminate_on_nan`: end the run, with a failure status, as soon as the train loss is NaN or infinite.

It runs first (priority HIGHEST) so that checkpoint writers later in the same hook point see
the failed run and do not save the diverged state; on every rank, so all ranks stop together.
"""

from __future__ import annotations

import math
from typing import Any

from dsl.callbacks._common import output
from dsl.engine.hooks import Callback
from dsl.language.registry import register


@register("callback", "terminate_on_nan", params={}, unique=True, reads=("train/loss",))
class TerminateOnNan(Callback):
    """Fail the run at the first train step whose loss is NaN or infinite, without checkpointing it."""

    priority = "HIGHEST"

    def after_train_iter(self, runner: Any) -> None:
        loss = output(runner.outputs, "loss", "train", self.name)
        if not math.isfinite(loss):
            runner.fail(
                f"loss is {loss} at step {runner.step}; lower the learning rate or check the data "
                f"(the last checkpoint is from before the divergence)"
            )
