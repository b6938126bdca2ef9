"""One swept setting: its dotted path, its space, what it can produce and how a trial draws from it.

`candidates` are the values `dslrun validate` tries in the pipeline: every value of a choice,
every value of a short int range (its ends and evenly spread values of a long one), the ends
and the middle of a continuous range. Each schema bound (minimum, enum, type) is then either
met by every value the space can produce or broken by one of these.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

_MAX_CANDIDATES = 20


@dataclass(frozen=True)
class Space:
    """The space of one parameter, read from its (schema-valid) mapping in `sweep.parameters`."""

    path: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    step: int = 1
    log: bool = False
    values: tuple[Any, ...] = ()

    @classmethod
    def read(cls, path: str, spec: dict[str, Any]) -> Space:
        return cls(
            path=path,
            type=spec["type"],
            low=spec.get("low"),
            high=spec.get("high"),
            step=int(spec.get("step", 1)),
            log=bool(spec.get("log", False)) or spec["type"] == "log_uniform",
            values=tuple(spec.get("values", ())),
        )

    def problem(self) -> tuple[str, str] | None:
        """(the key at fault, what is wrong with the space itself), or None."""
        if self.type == "choice":
            texts = [json.dumps(v, sort_keys=True) for v in self.values]
            if len(set(texts)) != len(texts):
                return "values", "the values repeat one another; list each once"
            return None
        assert self.low is not None and self.high is not None
        if self.low > self.high:
            return "high", f"high {self.high} is below low {self.low}"
        if self.log and self.low <= 0:
            return "low", f"a log scale needs low > 0, got {self.low}; use type: uniform, or a positive low"
        if self.type == "int":
            if self.low != int(self.low) or self.high != int(self.high):
                return "low", f"an int space needs whole numbers for low and high, got {self.low} and {self.high}"
            if self.log and self.step != 1:
                return "step", "an int space on a log scale has step 1; remove step or log"
        return None

    def candidates(self) -> list[Any]:
        """Values to try in the pipeline: together they meet every bound a schema can set, or one breaks it."""
        if self.type == "choice":
            return list(self.values)
        assert self.low is not None and self.high is not None
        if self.type == "int":
            grid = self.grid()
            if len(grid) <= _MAX_CANDIDATES:
                return grid
            picks = {grid[round(i * (len(grid) - 1) / (_MAX_CANDIDATES - 1))] for i in range(_MAX_CANDIDATES)}
            return sorted(picks)
        middle = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        return [float(self.low), float(self.high), float(middle)]  # the ends first: they name what to narrow

    def grid(self) -> list[Any]:
        """Every value (choice, int), for the grid method; empty for a continuous space."""
        if self.type == "choice":
            return list(self.values)
        if self.type == "int":
            assert self.low is not None and self.high is not None
            return list(range(int(self.low), int(self.high) + 1, self.step))
        return []

    def where(self, value: Any) -> str:
        """Which end of the space `value` is, for messages: `high`, `values[2]`, ..."""
        if self.type == "choice":
            return f"values[{self.values.index(value)}]"
        if value == self.low:
            return "low"
        if value == self.high:
            return "high"
        return "a value between low and high"

    def suggest(self, trial: Any) -> Any:
        """Draw this parameter's value for an Optuna trial (the name is the dotted path)."""
        if self.type == "choice":
            if all(v is None or isinstance(v, (bool, int, float, str)) for v in self.values):
                return trial.suggest_categorical(self.path, list(self.values))
            # Optuna stores scalars only: a list or mapping value is drawn as its JSON text.
            text = trial.suggest_categorical(self.path, [json.dumps(v, sort_keys=True) for v in self.values])
            return json.loads(text)
        assert self.low is not None and self.high is not None
        if self.type == "int":
            return trial.suggest_int(self.path, int(self.low), int(self.high), step=self.step, log=self.log)
        return trial.suggest_float(self.path, float(self.low), float(self.high), log=self.log)

    def grid_values(self) -> list[Any]:
        """The grid as Optuna's GridSampler stores it (scalars; JSON text for structured choices)."""
        values = self.grid()
        if all(v is None or isinstance(v, (bool, int, float, str)) for v in values):
            return values
        return [json.dumps(v, sort_keys=True) for v in values]


def override(path: str, value: Any) -> str:
    """The `--set` text that gives `path` this value (JSON is YAML, so the value reads back as it was)."""
    return f"{path}={json.dumps(value)}"


def read_spaces(sweep: dict[str, Any]) -> list[Space]:
    return [Space.read(path, spec) for path, spec in sweep.get("parameters", {}).items() if isinstance(spec, dict)]
