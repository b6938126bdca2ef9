"""`checkpoint`: when the training state is saved, and the best model kept apart.

The runner owns the checkpoint itself (model, optimizer, step, epoch, data position, in
model_dir/checkpoints/, restored on start); this callback decides *when* to write it and
sets how many are kept (the engine reads `max_to_keep` from here). With `save_best` the
best model so far also lives in model_dir/best/ (see `_best.py`), which older
checkpoints falling out of `max_to_keep` cannot take away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.callbacks._common import Cadence, format_value, save_checkpoint
from dsl.callbacks._monitor import MODE_PARAM, Monitor, monitor_param
from dsl.engine.hooks import Callback
from dsl.language.context import BuildContext
from dsl.language.registry import register


@register(
    "callback",
    "checkpoint",
    params={
        "every_n_epochs": {
            "description": "Save the training state every this many train epochs (null: not by epoch).",
            "type": ["integer", "null"],
            "minimum": 1,
            "default": 1,
        },
        "every_n_iters": {
            "description": "Save the training state every this many train steps instead of by epoch (null: by epoch).",
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
        },
        "max_to_keep": {
            "description": "How many recent checkpoints to keep in model_dir/checkpoints.",
            "type": "integer",
            "minimum": 1,
            "default": 5,
        },
        "save_best": {
            "description": "Also keep the best model so far in model_dir/best/ (with best.json); null: do not.",
            "type": ["object", "null"],
            "properties": {
                "monitor": monitor_param("val/accuracy", "The output that decides which model is best"),
                "mode": MODE_PARAM,
            },
            "additionalProperties": False,
            "default": None,
        },
        "save_last": {
            "description": "Save the training state when the run ends, so a finished run keeps its last state.",
            "type": "boolean",
            "default": True,
        },
    },
    unique=True,
)
class Checkpoint(Callback):
    """Save the training state periodically (and the best model so far) in the run directory.

    Periodic, best and last checkpoints.

    Example:
        callbacks:
          - type: checkpoint
            every_n_epochs: 5
            save_best: {monitor: val/accuracy}
    """

    priority = "NORMAL"
    chief_only = True

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        super().__init__(params, context)
        best = self.params.get("save_best")
        self.best_monitor = (
            Monitor(best.get("monitor", "val/accuracy"), best.get("mode", "auto"), "checkpoint.save_best.monitor")
            if best is not None
            else None
        )
        self.best_value: float | None = None
        self._best_loaded = False

    def before_run(self, runner: Any) -> None:
        self._iters = Cadence(self.params["every_n_iters"], runner.step)
        # Counted in completed data epochs: a train phase cut short (a stop) does not count.
        self._epochs = Cadence(
            None if self.params["every_n_iters"] else self.params["every_n_epochs"], runner.epoch
        )
        if self.best_monitor is not None:
            self.best_monitor.check_workflow(runner)
            if runner.resumed and not self._best_loaded:
                self._resume_best(runner)

    def before_save_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        if self.best_monitor is not None:
            state.update(monitor=self.best_monitor.name, mode=self.best_monitor.mode, best=self.best_value)

    def after_load_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        """The best so far as it stood at the checkpoint being resumed (unless it watched something else)."""
        if self.best_monitor is not None and self._same_monitor(state):
            self.best_value, self._best_loaded = state.get("best"), True

    def _resume_best(self, runner: Any) -> None:
        """A checkpoint written before callback state was saved: continue from best.json.

        A fresh run (e.g. `--no-resume`) starts its own best, replacing best/ at its first val.
        """
        from dsl.engine.best import read_best

        record = read_best(Path(runner.model_dir))
        if record and self._same_monitor(record):
            self.best_value = float(record["value"])

    def _same_monitor(self, record: dict[str, Any]) -> bool:
        monitor = self.best_monitor
        return monitor is not None and (record.get("monitor"), record.get("mode")) == (monitor.name, monitor.mode)

    def reads_replica_state(self, step_before: int, step_after: int) -> bool:
        """The saves of `every_n_iters` (the `Cadence` below fires on the same crossings)."""
        every = self.params["every_n_iters"]
        return bool(every) and step_after // every > step_before // every

    def after_train_iter(self, runner: Any) -> None:
        if self._iters.advance(runner.step):
            save_checkpoint(runner)

    def after_train_epoch(self, runner: Any) -> None:
        if self._epochs.advance(runner.epoch):
            save_checkpoint(runner)
        self._keep_if_best(runner)

    def after_val_epoch(self, runner: Any) -> None:
        self._keep_if_best(runner)

    def after_run(self, runner: Any) -> None:
        if self.params["save_last"]:
            save_checkpoint(runner)

    def _keep_if_best(self, runner: Any) -> None:
        if self.best_monitor is None or runner.failed:
            return
        value = self.best_monitor.value(runner)
        if value is None or not self.best_monitor.is_improvement(value, self.best_value):
            return
        from dsl.engine.best import write_best

        self.best_value = value
        record = {
            "monitor": self.best_monitor.name,
            "mode": self.best_monitor.mode,
            "value": value,
            "step": runner.step,
            "epoch": runner.epoch,
        }
        path = write_best(Path(runner.model_dir), runner.model, record)
        runner.print(f"new best {self.best_monitor.name} {format_value(value)} at step {runner.step}: {path}")

