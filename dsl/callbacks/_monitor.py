"""A watched output such as `val/accuracy`: where it comes from and which way is better.

Shared by `early_stopping` and `checkpoint.save_best`. Pure Python.
"""

from __future__ import annotations

import math
from typing import Any

from dsl.language.errors import DslError
from dsl.language.goals import AUTO_DESCRIPTION, better
from dsl.language.registry import PHASE_OUTPUT_FORMAT

# Outputs whose name contains one of these grow when the model improves (Keras' `auto` rule,
# widened to the usual classification metrics).


def monitor_param(default: str, purpose: str) -> dict[str, Any]:
    """A parameter naming a phase output; its format lets `dslrun validate` check the name (dsl.language.outputs)."""
    return {
        "description": f"{purpose}, written <phase>/<output>, e.g. val/accuracy, val/loss or train/loss.",
        "type": "string",
        "format": PHASE_OUTPUT_FORMAT,
        "pattern": "^(train|val)/[A-Za-z0-9_.-]+$",
        "default": default,
    }


MODE_PARAM: dict[str, Any] = {
    "description": (
        f"Whether a larger (max) or smaller (min) value is better; auto: {AUTO_DESCRIPTION}."
    ),
    "type": "string",
    "enum": ["auto", "min", "max"],
    "default": "auto",
}


class Monitor:
    """The output `phase/name` of a callback's `key` (e.g. `early_stopping.monitor`)."""

    def __init__(self, name: str, mode: str, key: str, min_delta: float = 0.0) -> None:
        self.name = name
        self.phase, _, self.output = name.partition("/")
        self.key = key
        self.min_delta = abs(min_delta)
        if mode == "auto":
            mode = better(self.output)
        self.mode = mode

    def check_workflow(self, runner: Any) -> None:
        """Fail at the start, not after hours, when no phase of the workflow produces the output."""
        workflow = [[phase, count] for phase, count in runner.workflow]
        phases = [phase for phase, _ in workflow]
        if self.phase not in phases:
            raise DslError(
                f"{self.key} is {self.name!r} but runner.workflow {workflow} has no {self.phase} phase; "
                f"add [{self.phase}, 1] to runner.workflow or monitor an output of another phase"
            )

    def value(self, runner: Any) -> float | None:
        """The output after the phase that just ended, or None when it is another phase."""
        if runner.mode != self.phase:
            return None
        try:
            return float(runner.phase_outputs[self.output])
        except KeyError:
            known = ", ".join(f"{self.phase}/{k}" for k in sorted(runner.phase_outputs)) or "none"
            raise DslError(
                f"{self.key} is {self.name!r}, but the {self.phase} phase has no output {self.output!r}; "
                f"available: {known}"
            ) from None

    def is_improvement(self, current: float, best: float | None) -> bool:
        """Better than `best` by more than `min_delta` (anything finite beats no best yet)."""
        if not math.isfinite(current):
            return False
        if best is None:
            return True
        if self.mode == "max":
            return current - self.min_delta > best
        return current + self.min_delta < best
