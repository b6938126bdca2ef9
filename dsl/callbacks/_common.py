"""Small pieces the callbacks share: cadence, value formatting, positions, safe saves.

Pure Python (no TensorFlow), so the public callback modules may import it at the top.
"""

from __future__ import annotations

import math
from typing import Any

from dsl.language.errors import DslError


def every_n_iters_param(default: int | None, what: str, unit: str = "train steps") -> dict[str, Any]:
    """The `every_n_iters` parameter schema, shared so every callback words it alike."""
    nullable = default is None
    return {
        "description": (
            f"{what} every this many {unit}"
            + (" (null: never between phases)." if nullable else ".")
        ),
        "type": ["integer", "null"] if nullable else "integer",
        "minimum": 1,
        "default": default,
    }


class Cadence:
    """Fires every `every` steps of a counter that may advance several steps per call.

    With `steps_per_call > 1` the global step jumps (e.g. 0, 4, 8, ...), so "step % n == 0"
    would miss multiples; a cadence fires whenever a multiple of `every` was crossed.
    """

    def __init__(self, every: int | None, start: int = 0) -> None:
        self.every = every
        self.value = start
        self.delta = 0

    def advance(self, value: int) -> bool:
        """Move the counter to `value` (remembering the step delta); True when a multiple was crossed."""
        every = self.every or 0
        crossed = bool(every) and value // every > self.value // every
        self.delta = value - self.value
        self.value = value
        return crossed


def format_value(value: float) -> str:
    """4 decimals for ordinary values, scientific notation for tiny or huge ones (learning rates)."""
    if value != 0 and math.isfinite(value) and not 1e-3 <= abs(value) < 1e5:
        return f"{value:.3e}"
    return f"{value:.4f}"


def format_values(values: dict[str, float]) -> str:
    """`loss 1.2345, accuracy 0.5000, ...`: loss and accuracy first, so lines line up, then the rest as given."""
    names = sorted(values, key=lambda name: (name != "loss", name != "accuracy"))
    return ", ".join(f"{name} {format_value(values[name])}" for name in names)


def _of(count: int, total: int | None) -> str:
    return f"{count}/{total}" if total else str(count)


def train_epoch(runner: Any) -> int:
    """The 1-based epoch the last train step belongs to.

    `runner.epoch` counts completed epochs and already includes an epoch whose last step
    just ran, so during a train phase the step count says which epoch it is.
    """
    if runner.steps_per_epoch:
        return max(1, math.ceil(int(runner.step) / int(runner.steps_per_epoch)))
    return int(runner.epoch) + 1


def iter_position(runner: Any) -> str:
    """Where an `after_*_iter` happens, for log lines: `epoch 2/10 iter 150/390 (step 540)`."""
    if runner.mode == "val":
        return f"iter {_of(runner.inner_step, runner.phase_steps)} (step {runner.step})"
    if runner.by_epoch:
        epoch = _of(train_epoch(runner), runner.max_epochs)
        return f"epoch {epoch} iter {_of(runner.inner_step, runner.phase_steps)} (step {runner.step})"
    return f"iter {_of(runner.step, runner.max_iters)}"


def rank_zero_note(runner: Any) -> str:
    """` (rank 0)` after a value from the chief's own batches when several ranks train, else nothing:
    a train phase's values are all ranks', reduced at its end, but the values within it are one rank's."""
    return " (rank 0)" if runner.placement.world_size > 1 else ""


def phase_position(runner: Any) -> str:
    """Where an `after_*_epoch` happens, for log lines: `epoch 2/10 (step 780)` or `iter 2000/5000`."""
    if runner.by_epoch:
        epoch = train_epoch(runner) if runner.mode == "train" else runner.epoch
        return f"epoch {_of(epoch, runner.max_epochs)} (step {runner.step})"
    return f"iter {_of(runner.step, runner.max_iters)}"


def output(values: dict[str, float], name: str, mode: str, key: str) -> float:
    """`values[name]`, or an error naming the YAML key and the outputs that do exist."""
    try:
        return float(values[name])
    except KeyError:
        known = ", ".join(f"{mode}/{k}" for k in sorted(values)) or "none"
        raise DslError(
            f"callback {key} needs the {mode} output {name!r}, but the {mode} phase produced "
            f"only: {known}; check the modeler's metrics or remove the callback"
        ) from None


def save_checkpoint(runner: Any) -> str | None:
    """`runner.save_checkpoint()` unless the run failed: a diverged state must not become the latest checkpoint."""
    if runner.failed:
        return None
    path: str | None = runner.save_checkpoint()
    return path
