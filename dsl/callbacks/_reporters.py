"""Base classes of the callbacks that print one output (train_loss, val_accuracy, ...).

Pure Python: the printing callbacks subclass these and only pick the output's name.
"""

from __future__ import annotations

from typing import Any

from dsl.callbacks._common import Cadence, format_value, iter_position, output, phase_position, rank_zero_note
from dsl.engine.hooks import Callback

# What the `progress` bar shows of a train phase, live and at its end.
BAR_OUTPUTS = ("loss", "accuracy")


class TrainValueReporter(Callback):
    """Prints a train output every `every_n_iters` steps and its phase value after each train epoch.

    The lines within a phase are the chief's own batches (a per-step allreduce would cost every
    step a collective for a log line); on several ranks they say `(rank 0)`. The phase's value
    is every rank's, reduced from the metric states.

    `windowed` outputs (the loss) are averaged over the steps since the last line, as the
    seed's train_loss did; the others (accuracy) are already running over the phase and are
    printed as they are.
    """

    output_name = "loss"
    windowed = False
    priority = "VERY_LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self._cadence = Cadence(self.params["every_n_iters"], runner.step)
        self._reset_window()
        # A `progress` bar already ends each train phase with this output: its line would repeat it.
        self._bar_shows = self.output_name in BAR_OUTPUTS and bool(runner.pipeline.callbacks_of("progress"))

    def _reset_window(self) -> None:
        self._sum, self._steps = 0.0, 0

    def after_train_iter(self, runner: Any) -> None:
        due = self._cadence.advance(runner.step)
        value = output(runner.outputs, self.output_name, "train", self.name)
        self._sum += value * self._cadence.delta
        self._steps += self._cadence.delta
        if due:
            shown = self._sum / self._steps if self.windowed and self._steps else value
            runner.print(f"train {iter_position(runner)}: {self.output_name} {format_value(shown)}{rank_zero_note(runner)}")
            self._reset_window()

    def after_train_epoch(self, runner: Any) -> None:
        value = output(runner.phase_outputs, self.output_name, "train", self.name)
        if not self._bar_shows:
            runner.print(f"train {phase_position(runner)}: {self.output_name} {format_value(value)}")
        self._reset_window()


class ValValueReporter(Callback):
    """Prints a val output (over the whole val phase) at the end of each val phase."""

    output_name = "loss"
    priority = "VERY_LOW"
    chief_only = True

    def after_val_epoch(self, runner: Any) -> None:
        value = output(runner.phase_outputs, self.output_name, "val", self.name)
        runner.print(f"val {phase_position(runner)}: {self.output_name} {format_value(value)}")
