"""`early_stopping`: stop training when a monitored output has stopped improving.

Runs on every rank (not only the chief): the phase outputs it reads are averaged across
ranks, so every rank takes the same decision at the same step.
"""

from __future__ import annotations

from typing import Any

from dsl.callbacks._common import format_value
from dsl.callbacks._monitor import MODE_PARAM, Monitor, monitor_param
from dsl.engine.hooks import Callback
from dsl.language.context import BuildContext
from dsl.language.registry import register


@register(
    "callback",
    "early_stopping",
    params={
        "monitor": monitor_param("val/loss", "The output to watch"),
        "mode": MODE_PARAM,
        "patience": {
            "description": "Stop after this many phases of the monitored output's kind in a row without improvement.",
            "type": "integer",
            "minimum": 1,
            "default": 5,
        },
        "min_delta": {
            "description": "Smallest change of the monitored value that counts as an improvement.",
            "type": "number",
            "minimum": 0,
            "default": 0.0,
        },
        "baseline": {
            "description": (
                "A value the monitored output must beat; phases that do not beat it count "
                "against patience (null: no baseline)."
            ),
            "type": ["number", "null"],
            "default": None,
        },
    },
)
class EarlyStopping(Callback):
    """Stop training when a monitored output (e.g. val/loss) has not improved for `patience` phases.

    Keras' EarlyStopping over the loop's phases.

    Args (YAML):
        monitor: `<phase>/<output>`. Defaults to `val/loss`.
        mode: `auto`, `min` or `max`. Defaults to `auto`.
        patience: phases without improvement before stopping. Defaults to 5.
        min_delta: smallest improvement. Defaults to 0.
        baseline: value to beat. Defaults to none.

    Example:
        callbacks:
          - {type: early_stopping, monitor: val/accuracy, patience: 3}
    """

    priority = "ABOVE_NORMAL"

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        super().__init__(params, context)
        self.monitor = Monitor(
            self.params["monitor"], self.params["mode"], "early_stopping.monitor", self.params["min_delta"]
        )
        self.patience = int(self.params["patience"])
        self.best: float | None = self.params["baseline"]
        self.best_step: int | None = None
        self.wait = 0

    def before_run(self, runner: Any) -> None:
        self.monitor.check_workflow(runner)

    def before_save_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        state.update(monitor=self.monitor.name, mode=self.monitor.mode, best=self.best, best_step=self.best_step,
                     wait=self.wait)

    def after_load_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        """Resume the patience of the run being resumed (unless it watched something else);
        when it was already spent, that run stopped here, and so does this one."""
        if (state.get("monitor"), state.get("mode")) != (self.monitor.name, self.monitor.mode):
            return
        self.best, self.best_step, self.wait = state.get("best"), state.get("best_step"), int(state.get("wait", 0))
        if self.wait >= self.patience:
            runner.request_stop(f"{self._reason()}; raise early_stopping.patience to train further")

    def after_epoch(self, runner: Any) -> None:
        current = self.monitor.value(runner)
        if current is None:
            return
        if self.monitor.is_improvement(current, self.best):
            self.best, self.best_step, self.wait = current, runner.step, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            runner.request_stop(self._reason())

    def _reason(self) -> str:
        if self.best_step is None and self.best is not None:
            best = f"never beat the baseline {format_value(self.best)}"
        elif self.best_step is None or self.best is None:
            best = "was never finite"
        else:
            best = f"best {format_value(self.best)} at step {self.best_step}"
        return (
            f"early stopping: {self.monitor.name} did not improve ({self.monitor.mode}, min_delta "
            f"{self.monitor.min_delta:g}) for {self.wait} {self.monitor.phase} phases; {best}"
        )
