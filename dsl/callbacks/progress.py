"""`progress`: a progress bar on stderr (chief only), with ETA and the live loss and accuracy.

The live values are the chief's own batches (`(rank 0)` on several ranks); the bar that ends a
phase shows the phase's values over every rank.

On a terminal the bar redraws one line in place; when stderr is a file or a pipe (a batch
job's log) each update is a plain new line, and less often, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from dsl.callbacks._common import format_value, rank_zero_note, train_epoch
from dsl.callbacks._reporters import BAR_OUTPUTS
from dsl.engine.hooks import Callback
from dsl.language.registry import register

_WIDTH = 24
_SHOWN = BAR_OUTPUTS


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


@register(
    "callback",
    "progress",
    params={
        "refresh_seconds": {
            "description": (
                "Redraw at most this often (null: every 1 s on a terminal, every 10 s when stderr is a file or pipe)."
            ),
            "type": ["number", "null"],
            "minimum": 0,
            "default": None,
        },
    },
    unique=True,
)
class Progress(Callback):
    """Show a progress bar on stderr: phase, step/total, ETA and the live loss and accuracy."""

    priority = "LOWEST"
    chief_only = True
    clock = staticmethod(time.monotonic)

    def before_run(self, runner: Any) -> None:
        self._tty = sys.stderr.isatty()
        refresh = self.params["refresh_seconds"]
        self._refresh = float(refresh) if refresh is not None else (1.0 if self._tty else 10.0)
        self._width = 0

    def before_epoch(self, runner: Any) -> None:
        self._start = self.clock()
        self._drawn_at: float | None = None
        self._first: tuple[float, int] | None = None  # (time, steps) after the phase's first call

    def after_iter(self, runner: Any) -> None:
        if runner.inner_step == runner.phase_steps:
            return  # the end of the phase draws the last state
        now = self.clock()
        if self._first is None:
            self._first = (now, runner.inner_step)  # the first call traced the graph: no rate to go by
        if self._drawn_at is None or now - self._drawn_at >= self._refresh:
            self._draw(runner, now, final=False)

    def after_epoch(self, runner: Any) -> None:
        self._draw(runner, self.clock(), final=True)

    def _draw(self, runner: Any, now: float, final: bool) -> None:
        self._drawn_at = now
        line = self._line(runner, now - self._start, final)
        if self._tty:
            # Pad over the rest of a longer previous line.
            sys.stderr.write("\r" + line.ljust(self._width) + ("\n" if final else ""))
            self._width = 0 if final else len(line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def _line(self, runner: Any, elapsed: float, final: bool) -> str:
        phase = runner.mode
        if runner.by_epoch:
            phase += f" epoch {train_epoch(runner) if runner.mode == 'train' else runner.epoch}"
        values = runner.phase_outputs if final else runner.outputs
        shown = "  ".join(f"{name} {format_value(values[name])}" for name in _SHOWN if name in values)
        if shown and not final and runner.mode == "train":
            shown += rank_zero_note(runner)
        rate = self._rate(runner.inner_step, self._start + elapsed)
        return f"{phase} {_bar(runner.inner_step, runner.phase_steps, elapsed, final, rate)}  {shown}".rstrip()

    def _rate(self, done: int, now: float) -> float | None:
        """Seconds per step since the phase's first call (which includes tracing), None before a second one."""
        if self._first is None or done <= self._first[1] or now <= self._first[0]:
            return None
        return (now - self._first[0]) / (done - self._first[1])


def _bar(done: int, total: int | None, elapsed: float, final: bool, rate: float | None = None) -> str:
    """`[=====.....] 150/390 ETA 0:01:02`; the elapsed time once the phase is over or its length unknown;
    `ETA ?` until a rate is known (the first call's time is mostly tracing, a wild guess)."""
    if not total:
        return f"{done}/? {_duration(elapsed)}"
    filled = min(_WIDTH, _WIDTH * done // total)
    if final or not done:
        timing = _duration(elapsed)
    else:
        timing = f"ETA {_duration(rate * (total - done))}" if rate is not None else "ETA ?"
    return f"[{'=' * filled}{'.' * (_WIDTH - filled)}] {done}/{total} {timing}"
