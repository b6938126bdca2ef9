"""Metrics across ranks: each result computed once, from the state of every rank.

Averaging each rank's *result* is exact only for a plain mean. Mean IoU, pixel accuracy,
precision or any ratio of sums comes out different from what one process reports on the
same data, and so does accuracy in float: two epochs with the same count of correct
examples could give rank 0 two different numbers, and `save_best` took a tie for a gain.

So a metric is reduced by its *state*, as MMEngine's Evaluator and Model Garden's
`aggregate_logs` / `reduce_aggregated_logs` do:

- **summed** (the default, what every Keras metric dslrun uses keeps): its variables are
  totals and counts (a Mean's total and count, an accuracy's correct and seen, MeanIoU's
  confusion matrix). They are summed over the ranks, as float64, so counts stay integers;
  the result is then computed from the sums, exactly what one process that saw every
  rank's data computes.
- **gathered**: a metric whose result is no function of sums (mAP needs every detection)
  declares `reduction = "gather"` and two methods, `local_results()` (this rank's per-example
  results, picklable) and `result_from(parts)` (the value from every rank's parts, in rank
  order). The backend gathers the parts and every rank computes the same value.

The metrics' own state is restored afterwards: a rank keeps counting only what it saw.
What must read the summed state itself (a classifier's per-class table from its confusion
matrix) is given `while_summed`, called while the metrics hold every rank's sums.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from dsl.language.context import Placement
from dsl.language.errors import DslError

SUMMED = "sum"
GATHERED = "gather"


class RankReducer(Protocol):
    """What a backend offers for this (dsl.engine.contracts.Backend): exact sums and a gather."""

    placement: Placement

    def sum_across_ranks(self, arrays: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]: ...
    def gather_objects(self, value: Any) -> list[Any]: ...


def reduction_of(metric: Any) -> str:
    """How `metric` is combined across ranks: 'sum' (its variables are sums) or 'gather'."""
    reduction = getattr(metric, "reduction_across_ranks", SUMMED)
    if reduction not in (SUMMED, GATHERED):
        raise DslError(f"metric {metric.name!r} declares reduction_across_ranks {reduction!r}; "
                       f"it must be {SUMMED!r} or {GATHERED!r}")
    if reduction == GATHERED and not (hasattr(metric, "local_results") and hasattr(metric, "result_from")):
        raise DslError(f"metric {metric.name!r} is gathered across ranks but has no local_results() "
                       f"and result_from(parts)")
    return str(reduction)


def reduced_results(metrics: dict[str, Any], reducer: RankReducer,
                    while_summed: Callable[[], None] | None = None) -> dict[str, float]:
    """Every metric's value over the data of all ranks (one process: its own results).

    Each rank must call this with the same metrics in the same order: the sums and the
    gathers are collective operations. `while_summed` is called on every rank while the
    summed metrics hold the totals of all ranks.
    """
    if reducer.placement.world_size <= 1:
        if while_summed is not None:
            while_summed()
        return {name: float(metric.result()) for name, metric in metrics.items()}
    summed = [metric for metric in metrics.values() if reduction_of(metric) == SUMMED]
    gathered = {name: metric for name, metric in metrics.items() if reduction_of(metric) == GATHERED}
    state = _unique_variables(summed)
    local = [variable.numpy() for variable in state]
    totals = reducer.sum_across_ranks([value.astype(np.float64) for value in local])
    if all(np.array_equal(total, value) for total, value in zip(totals, local)):
        state = []  # the other ranks saw nothing (or one process holds every replica's state)
    try:
        for variable, total in zip(state, totals):
            variable.assign(total.astype(variable.dtype.as_numpy_dtype))
        results = {name: float(metric.result()) for name, metric in metrics.items() if name not in gathered}
        if while_summed is not None:
            while_summed()
    finally:
        for variable, value in zip(state, local):
            variable.assign(value)
    for name, metric in gathered.items():
        results[name] = float(metric.result_from(reducer.gather_objects(metric.local_results())))
    return {name: results[name] for name in metrics}


def _unique_variables(metrics: list[Any]) -> list[Any]:
    """The metrics' state variables, each once (views of another metric's state own none)."""
    seen: set[Any] = set()
    variables = []
    for metric in metrics:
        for variable in metric.variables:
            if variable.ref() not in seen:
                seen.add(variable.ref())
                variables.append(variable)
    return variables
