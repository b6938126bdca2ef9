"""What a component's `build(params, context)` may know about the pipeline around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Placement:
    """Where this process sits in the job. Backends fill it; the local backend is 1 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


@dataclass
class BuildContext:
    """Facts shared between sections, so that no section repeats another's settings.

    Attributes:
        pipeline: the resolved pipeline (plain dict, defaults filled).
        image_shape: (height, width, channels) the network receives, from the inputter.
        num_classes: number of classes, from the inputter.
        model_dir: the run directory.
        placement: rank / world size of this process.
        steps_per_epoch: train steps per epoch for this process (None until the data is known).
        seed: the pipeline's seed, or None.
    """

    pipeline: dict[str, Any]
    image_shape: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10
    model_dir: Path = Path("runs/default")
    placement: Placement = field(default_factory=Placement)
    steps_per_epoch: int | None = None
    seed: int | None = None
