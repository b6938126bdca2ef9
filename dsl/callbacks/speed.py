"""`train_speed` / `val_speed`: throughput in images per second (all ranks) and ms per step.

The first calls of a run are slow for reasons that are not the model's speed (tracing the
`tf.function`, filling the input pipeline), so the first `warmup_iters` calls in each mode
are left out of every average.
"""

from __future__ import annotations

from typing import Any

from dsl.callbacks._common import Cadence, every_n_iters_param, iter_position, phase_position
from dsl.engine.hooks import Callback
from dsl.language.registry import register

_WARMUP = {
    "description": "Calls of the run (in this mode) left out of the averages: the first one traces the graph.",
    "type": "integer",
    "minimum": 0,
    "default": 1,
}


class _Timing:
    """Steps and seconds summed over some calls."""

    def __init__(self) -> None:
        self.steps, self.seconds = 0, 0.0

    def add(self, steps: int, seconds: float) -> None:
        self.steps += steps
        self.seconds += seconds

    def describe(self, global_batch_size: int) -> str:
        if not self.steps or self.seconds <= 0:
            return "not timed (warmup calls only)"
        images = global_batch_size * self.steps / self.seconds
        return f"{images:,.1f} images/s, {1000 * self.seconds / self.steps:.1f} ms/step"


class _Speed(Callback):
    mode = "train"
    priority = "VERY_LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self._calls = 0

    def before_epoch(self, runner: Any) -> None:
        if runner.mode != self.mode:
            return
        # The cadence counts the global step in train (like train_loss) and the phase's steps in val.
        self._cadence = Cadence(self.params["every_n_iters"], self._counter(runner))
        self._inner = runner.inner_step
        self._window, self._phase = _Timing(), _Timing()

    def _counter(self, runner: Any) -> int:
        return int(runner.step if self.mode == "train" else runner.inner_step)

    def after_iter(self, runner: Any) -> None:
        if runner.mode != self.mode:
            return
        steps, self._inner = runner.inner_step - self._inner, runner.inner_step
        due = self._cadence.advance(self._counter(runner))
        self._calls += 1
        if self._calls > self.params["warmup_iters"]:
            self._window.add(steps, runner.iter_seconds)
            self._phase.add(steps, runner.iter_seconds)
        if due and self._window.steps:
            runner.print(f"{self.mode} {iter_position(runner)}: {self._window.describe(runner.global_batch_size)}")
            self._window = _Timing()

    def after_epoch(self, runner: Any) -> None:
        if runner.mode == self.mode:
            average = self._phase.describe(runner.global_batch_size)
            if self._phase.steps:
                average += " (phase average)"
            runner.print(f"{self.mode} {phase_position(runner)}: {average}")


@register(
    "callback",
    "train_speed",
    params={
        "every_n_iters": every_n_iters_param(50, "Print the throughput of the last steps"),
        "warmup_iters": _WARMUP,
    },
)
class TrainSpeed(_Speed):
    """Print train throughput (images/s over all ranks, ms/step) every few steps and per epoch."""

    mode = "train"


@register(
    "callback",
    "val_speed",
    aliases=("eval_speed",),  # its former name, before it matched the workflow's `val`
    params={
        "every_n_iters": every_n_iters_param(
            None, "Print the validation throughput of the last steps", "validation steps"
        ),
        "warmup_iters": _WARMUP,
    },
)
class ValSpeed(_Speed):
    """Print validation throughput (images/s over all ranks, ms/step) at the end of each validation phase."""

    mode = "val"
