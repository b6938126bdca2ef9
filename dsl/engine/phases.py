"""The workflow unrolled into phases, so that a resumed run knows where it stands.

`[[train, 2], [val, 1]]` with `max_epochs: 3` is train(epoch 0), train(1), val, train(2),
val. Each phase records how many train units (epochs, or steps when iter-based) were done
before it, which is all a resumed run needs to skip what is finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Phase:
    mode: str  # "train" or "val"
    start: int  # train units (epochs or steps) completed before this phase
    count: int  # train units in this phase (1 epoch, or N steps); 0 for val


def plan_phases(workflow: Sequence[Sequence[Any]], total: int, by_epoch: bool) -> list[Phase]:
    """Every phase of the run, in order. A val phase repeats `count` times; a cycle that
    starts after all training is done is not run."""
    phases: list[Phase] = []
    done = 0
    while done < total:
        for mode, count in workflow:
            if mode == "val":
                phases.extend(Phase("val", done, 0) for _ in range(count))
                continue
            units = min(count, total - done)
            if by_epoch:
                phases.extend(Phase("train", done + i, 1) for i in range(units))
            elif units:
                phases.append(Phase("train", done, units))
            done += units
        if not any(mode == "train" for mode, _ in workflow):
            break  # a workflow without training (validated against, but never loops forever)
    return phases


def due_phases(plan: Sequence[Phase], position: Callable[[], tuple[int, int, bool]]) -> Iterator[Phase]:
    """The phases of `plan` that still have work, each judged when it is reached.

    `position()` gives where training stands then: train units done, val phases already run
    at that point (before a restart), and whether it is inside an epoch (by epoch, that
    means that epoch's val phases ran). It is the same on every rank, so every rank meets
    the same phases, and the collectives between them pair up.
    """
    vals_seen: Counter[int] = Counter()  # val phases met so far at each position
    for phase in plan:
        ordinal = vals_seen[phase.start] if phase.mode == "val" else 0
        vals_seen[phase.start] += phase.mode == "val"
        units_done, vals_done, mid_epoch = position()
        if phase.mode == "val":
            if phase.start == units_done and ordinal >= vals_done and not mid_epoch:
                yield phase
        elif phase.start + phase.count > units_done:
            yield phase
