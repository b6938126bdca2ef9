"""What a component's `build(params, context)` may know about the pipeline around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsl.language.resolved import Pipeline


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
        pipeline: the resolved pipeline, typed (dsl.language.resolved); None where a component
            is built alone, outside a pipeline.
        image_shape: (height, width, channels) of an image input, from the inputter.
        num_classes: number of classes (of an example, or of a pixel), from the inputter.
        vocabulary_size: token ids of a text input are below it, from the inputter's vocabulary.
        sequence_length: tokens per text input.
        class_names: the classes' names when the data names them.
        extra: the facts a task registered (dsl.language.facts), by name: read with `fact(name)`.
        model_dir: the run directory.
        placement: rank / world size of this process.
        steps_per_epoch: train steps per epoch for this process (None until the data is known).
        seed: the pipeline's seed, or None.
        fresh_start: the run starts over (`--no-resume`): what a component keeps in the run
            directory for resuming (a text vocabulary) is made anew, not read back.
    """

    pipeline: Pipeline | None = None
    image_shape: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10
    vocabulary_size: int | None = None
    sequence_length: int | None = None
    class_names: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    model_dir: Path = Path("runs/default")
    placement: Placement = field(default_factory=Placement)
    steps_per_epoch: int | None = None
    seed: int | None = None
    fresh_start: bool = False

    def learn(self, facts: dict[str, Any]) -> None:
        """Take the inputter's facts about the data; a fact this context has no field for is a
        programming error of the inputter, said at once rather than silently dropped."""
        from dsl.language.facts import task_facts

        known = {name for name in self.__dataclass_fields__ if name not in _NOT_FACTS}
        registered = set(task_facts())
        unknown = sorted(set(facts) - known - registered)
        if unknown:
            raise TypeError(f"the inputter reports {', '.join(unknown)}, which no field of BuildContext nor any "
                            f"registered fact names; facts are {', '.join(sorted(known | registered))}")
        for name, value in facts.items():
            if name in known:
                setattr(self, name, tuple(value) if name == "image_shape" else value)
            else:
                self.extra[name] = value

    def fact(self, name: str, default: Any = None) -> Any:
        """A task's registered fact (dsl.language.facts) as the inputter reported it, else `default`."""
        return self.extra.get(name, default)


_NOT_FACTS = {"pipeline", "model_dir", "placement", "steps_per_epoch", "seed", "fresh_start", "extra"}
