"""`stop_at_time`: checkpoint and stop when a wall-time budget is spent (e.g. a job's time slot).

A later run with the same model_dir resumes from that checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

from dsl.callbacks._common import save_checkpoint
from dsl.engine.hooks import Callback
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register


@register(
    "callback",
    "stop_at_time",
    params={
        "seconds": {
            "description": "Wall-clock budget in seconds from the start of this run (added to `minutes`, if given).",
            "type": ["number", "null"],
            "minimum": 0,
            "default": None,
        },
        "minutes": {
            "description": "Wall-clock budget in minutes from the start of this run (added to `seconds`, if given).",
            "type": ["number", "null"],
            "minimum": 0,
            "default": None,
        },
    },
    anyOf=[
        {"description": "a `seconds` budget", "required": ["seconds"], "properties": {"seconds": {"type": "number"}}},
        {"description": "a `minutes` budget", "required": ["minutes"], "properties": {"minutes": {"type": "number"}}},
    ],
)
class StopAtTime(Callback):
    """Save a checkpoint and stop training when this run has used its wall-clock budget.

    TensorLayer's StopAtTimeHook, checkpointing before it stops.

    Example:
        callbacks:
          - {type: stop_at_time, minutes: 55}
    """

    priority = "LOW"
    clock = staticmethod(time.monotonic)

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        super().__init__(params, context)
        seconds, minutes = self.params.get("seconds"), self.params.get("minutes")
        if seconds is None and minutes is None:
            raise DslError(
                "stop_at_time needs a budget: `seconds` or `minutes`, e.g. {type: stop_at_time, minutes: 55}"
            )
        self.budget = float(seconds or 0) + 60 * float(minutes or 0)

    def before_run(self, runner: Any) -> None:
        self._start = self.clock()

    def after_train_iter(self, runner: Any) -> None:
        elapsed = self.clock() - self._start
        if elapsed < self.budget or runner.should_stop:
            return
        path = save_checkpoint(runner)
        saved = f"; checkpoint {path}" if path else ""
        runner.request_stop(f"stop_at_time: {elapsed:.0f} s elapsed, budget {self.budget:g} s{saved}")
