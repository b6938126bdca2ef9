"""A pipeline's `sweep:` section read once into the settings the driver and the report use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsl.language.goals import better
from dsl.sweep.checks import available_slots, trial_processes
from dsl.sweep.space import Space, read_spaces


@dataclass
class SweepPlan:
    """What `dslrun sweep FILE` does, from the resolved (validated) pipeline."""

    file: str
    overrides: tuple[str, ...]
    pipeline: dict[str, Any]
    spaces: list[Space]
    metric: str
    goal: str
    directory: Path
    storage: str
    study_name: str
    plugins: tuple[str, ...] = ()  # --plugin modules, given to each trial's dslrun run

    @classmethod
    def read(cls, file: str, overrides: tuple[str, ...], pipeline: dict[str, Any]) -> SweepPlan:
        sweep = pipeline["sweep"]
        metric = sweep.get("metric", "val/loss")
        goal = sweep.get("goal", "auto")
        if goal == "auto":
            goal = better(metric)
        directory = Path(sweep.get("directory") or f"runs/{pipeline['name']}-sweep").absolute()
        storage = sweep.get("storage") or f"sqlite:///{directory / 'study.db'}"
        return cls(file, overrides, pipeline, read_spaces(sweep), metric, goal, directory, storage, pipeline["name"])

    @property
    def sweep(self) -> dict[str, Any]:
        return self.pipeline["sweep"]  # type: ignore[no-any-return]

    @property
    def phase(self) -> str:
        return self.metric.partition("/")[0]

    @property
    def output(self) -> str:
        return self.metric.partition("/")[2]

    @property
    def backend(self) -> str:
        return str(self.pipeline.get("runner", {}).get("backend", "auto"))

    @property
    def ranks(self) -> int:
        return int(self.sweep.get("ranks_per_trial", 1))

    @property
    def parallel(self) -> int:
        """Trials at once: parallel_trials, or fewer when the slots hold fewer."""
        wanted = int(self.sweep.get("parallel_trials", 1))
        return max(1, min(wanted, available_slots(self.sweep) // trial_processes(self.pipeline)))

    def trial_dir(self, number: int) -> Path:
        return self.directory / f"trial-{number:04d}"
