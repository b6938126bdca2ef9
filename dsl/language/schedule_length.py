"""The learning-rate schedule against the length of the run.

`modeler.lr_schedule` speaks in epochs (warmup_epochs, piecewise boundaries, decay_epochs);
the run is `runner.max_epochs` or `runner.max_iters` long. A warmup as long as the run, a
boundary after its end, a decay that never starts: each used to show only at start-up, or
never (a value silently unused). When both sides are in epochs the pipeline alone decides;
otherwise it takes the train steps per epoch, which `dslrun validate --data` counts.

Epochs become steps exactly as `dsl.modelers._schedules` converts them (rounded; a warmup
of any length at least one step), so what is reported is what the run would do.
Pure Python.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath

_BASE: JsonPath = ("modeler", "lr_schedule")


@dataclass(frozen=True)
class _Clock:
    """The run's length and a converter of epochs to the same unit (epochs, or steps)."""

    total: float
    convert: Callable[[float], float]
    steps_per_epoch: int | None
    length: str  # the run's length for messages, e.g. "runner.max_epochs: 1 at p.yaml:20"

    def describe(self, epochs: float, units: float) -> str:
        text = f"{epochs:g} epoch{'' if epochs == 1 else 's'}"
        if self.steps_per_epoch:
            text += f" = {units:g} steps at {self.steps_per_epoch} steps per epoch"
        return text


def check_schedule_length(
    pipeline: dict[str, Any], sources: SourceMap, steps_per_epoch: int | None = None
) -> list[Diagnostic]:
    """Problems of the schedule's lengths; without `steps_per_epoch`, those the epochs alone decide."""
    schedule = pipeline.get("modeler", {}).get("lr_schedule")
    clock = _clock(pipeline.get("runner", {}), sources, steps_per_epoch)
    if not isinstance(schedule, dict) or clock is None:
        return []
    found = _warmup(schedule, clock, sources)
    kind = schedule.get("type")
    if kind == "piecewise":
        found += _boundaries(schedule, clock, sources)
    elif kind in ("cosine", "exponential"):
        found += _decay(schedule, clock, sources)
    return found


def _clock(runner: dict[str, Any], sources: SourceMap, steps_per_epoch: int | None) -> _Clock | None:
    epochs, iters = runner.get("max_epochs"), runner.get("max_iters")
    if steps_per_epoch:
        total = iters if iters else (epochs or 0) * steps_per_epoch
        key = "max_iters" if iters else "max_epochs"
        value = iters if iters else epochs
        length = f"runner.{key}: {value} {_written(sources, ('runner', key))} = {total} steps"
        return _Clock(total, lambda e: round(float(e) * steps_per_epoch), steps_per_epoch, length)
    if epochs and not iters:
        return _Clock(epochs, float, None, f"runner.max_epochs: {epochs} {_written(sources, ('runner', 'max_epochs'))}")
    return None  # iter-based: epochs have no length without the data


def _warmup_units(schedule: dict[str, Any], clock: _Clock) -> float:
    warmup = schedule.get("warmup_epochs") or 0
    units = clock.convert(warmup)
    return max(units, 1) if warmup and clock.steps_per_epoch else units


def _warmup(schedule: dict[str, Any], clock: _Clock, sources: SourceMap) -> list[Diagnostic]:
    warmup = schedule.get("warmup_epochs") or 0
    units = _warmup_units(schedule, clock)
    if not warmup or units < clock.total:
        return []
    path = _BASE + ("warmup_epochs",)
    what = f"the warmup ({clock.describe(warmup, units)}) is as long as the whole run ({clock.length})"
    if schedule.get("type") == "cosine" and not schedule.get("decay_epochs"):
        message = f"{what}, so the cosine has no steps left; shorten the warmup or set decay_epochs"
        return [sources.diagnostic(path, message)]
    message = f"{what}: the learning rate never reaches optimizer.learning_rate; shorten the warmup or train longer"
    return [Diagnostic.at(sources.locate(path), path, message, severity="warning")]


def _boundaries(schedule: dict[str, Any], clock: _Clock, sources: SourceMap) -> list[Diagnostic]:
    boundaries = schedule.get("boundaries") or []
    values = schedule.get("values") or []
    if len(values) != len(boundaries) + 1 or any(b <= a for a, b in itertools.pairwise(boundaries)):
        return []  # a misshapen schedule is reported as such (dsl.language.checks); fix that first
    found = []
    previous = None
    for index, boundary in enumerate(boundaries):
        units = clock.convert(boundary)
        path = _BASE + ("boundaries", index)
        unused = f"values[{index + 1}] ({values[index + 1]:g})"
        if units >= clock.total:
            message = (f"boundary {clock.describe(boundary, units)} is not before the end of the run ({clock.length}), "
                       f"so {unused} is never used; remove it or train longer")
        elif previous is not None and units <= previous and clock.steps_per_epoch:
            message = (f"boundary {clock.describe(boundary, units)} falls on the same step as the one before it, "
                       f"so values[{index}] is never used; space the boundaries further apart")
        else:
            previous = units
            continue
        previous = units
        found.append(Diagnostic.at(sources.locate(path), path, message, severity="warning"))
    return found


def _decay(schedule: dict[str, Any], clock: _Clock, sources: SourceMap) -> list[Diagnostic]:
    decay = schedule.get("decay_epochs")
    if not decay:
        return []
    units = max(clock.convert(decay), 1)
    left = clock.total - _warmup_units(schedule, clock)
    path = _BASE + ("decay_epochs",)
    after = "after the warmup" if schedule.get("warmup_epochs") else "from the start"
    if schedule["type"] == "cosine" and units > left:
        message = (f"the cosine decays over {clock.describe(decay, units)} {after}, but the run ends first "
                   f"({clock.length}), so the rate never comes down to alpha times the rate; "
                   "set decay_epochs: null to decay over the rest of the run")
    elif schedule["type"] == "exponential" and schedule.get("staircase") and units >= left:
        message = (f"with staircase: true the first decay comes {clock.describe(decay, units)} {after}, "
                   f"after the run ends ({clock.length}), so the rate never changes; shorten decay_epochs")
    else:
        return []
    return [Diagnostic.at(sources.locate(path), path, message, severity="warning")]


def _written(sources: SourceMap, path: JsonPath) -> str:
    """`at file:line` where the value was written, or `by default`."""
    if path not in sources:
        return "by default"
    where = sources.locate(path)
    return f"at {where.file}:{where.line}"
