"""The workflow unrolled into phases, so that a resumed run knows where it stands.

`[[train, 2], [val, 1]]` with `max_epochs: 3` is train(epoch 0), train(1), val, train(2),
val. Each phase records how many train units (epochs, or steps when iter-based) were done
before it, which is all a resumed run needs to skip what is finished.
"""

from __future__ import annotations

from collections.abc import Sequence
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
