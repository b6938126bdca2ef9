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

    The data's facts come from the inputter (`Inputter.facts()`, see `learn`), whatever the
    task: a section reads those its data has and leaves the others at their defaults.

    Attributes:
        pipeline: the resolved pipeline (plain dict, defaults filled).
        image_shape: (height, width, channels) of an image input, from the inputter.
        num_classes: number of classes (of an example, or of a pixel), from the inputter.
        ignore_label: a target value that counts in no loss nor metric (None = every value counts).
        vocabulary_size: token ids of a text input are below it, from the inputter's vocabulary.
        sequence_length: tokens per text input.
        class_names: the classes' names when the data names them.
        max_boxes: boxes per image a detection batch holds (padded, with their count).
        model_dir: the run directory.
        placement: rank / world size of this process.
        steps_per_epoch: train steps per epoch for this process (None until the data is known).
        seed: the pipeline's seed, or None.
        fresh_start: the run starts over (`--no-resume`): what a component keeps in the run
            directory for resuming (a text vocabulary) is made anew, not read back.
    """

    pipeline: dict[str, Any]
    image_shape: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10
    ignore_label: int | None = None
    vocabulary_size: int | None = None
    sequence_length: int | None = None
    class_names: list[str] | None = None
    max_boxes: int | None = None
    model_dir: Path = Path("runs/default")
    placement: Placement = field(default_factory=Placement)
    steps_per_epoch: int | None = None
    seed: int | None = None
    fresh_start: bool = False

    def learn(self, facts: dict[str, Any]) -> None:
        """Take the inputter's facts about the data; a fact this context has no field for is a
        programming error of the inputter, said at once rather than silently dropped."""
        known = {name for name in self.__dataclass_fields__ if name not in _NOT_FACTS}
        unknown = sorted(set(facts) - known)
        if unknown:
            raise TypeError(f"the inputter reports {', '.join(unknown)}, which BuildContext has no field for; "
                            f"facts are {', '.join(sorted(known))}")
        for name, value in facts.items():
            setattr(self, name, tuple(value) if name == "image_shape" else value)


_NOT_FACTS = {"pipeline", "model_dir", "placement", "steps_per_epoch", "seed", "fresh_start"}
