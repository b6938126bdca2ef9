"""Where a run stands, the world it runs in and where it came from: the state the runner owns.

The runner is the one writer. The modules that decide how this state changes — resuming
(resume.py), a change of the number of ranks (resize.py), continuous evaluation (watch.py)
— read it and return what changes (a `Restored`, a `World`); the runner applies it here.
Callbacks read it through the runner's attributes (`step`, `epoch`, `steps_per_epoch`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, overload

from dsl.distributed.scaling import Scaling
from dsl.distributed.sync_batch_norm import BatchNormSync

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """What follows from the number of replicas: their batch, the learning-rate factor, the epoch's
    steps, whether batch norm is synchronised."""

    size: int  # the replicas the step functions were built for
    scaling: Scaling
    steps_per_epoch: int
    batch_norm: BatchNormSync | None = None  # None: a runner built without a backend's decision

    @property
    def batch_size(self) -> int:
        """This replica's batch."""
        return self.scaling.batch_size

    @property
    def global_batch_size(self) -> int:
        return self.scaling.batch_size * self.size


@dataclass(frozen=True)
class Restored:
    """What a restore found: the position the chief broadcast, and where it came from."""

    path: str | None  # the checkpoint this process read; None for a fresh start
    resumed: bool = False  # the chief resumed (a rank whose host lacks the files resumes from its broadcast)
    step: int = 0
    epoch: int = 0
    data_position: int = 0
    vals_done: int = 0  # val phases already run at the restored position
    stopped: bool = False  # a callback of the chief had ended the run
    loaded_state: dict[str, Any] | None = None  # the state file beside the checkpoint
    # Where the restored weights were taken (None for a best/ checkpoint without best.json).
    restored_step: int | None = None
    restored_epoch: int | None = None


@dataclass
class RunState:
    """Position (step, data epoch, batches into it, val phases done there), world, feed, origin."""

    world: World
    step: int = 0
    epoch: int = 0
    data_position: int = 0
    vals_done: int = 0  # val phases run at the current position (since the last train unit ended)
    schedule_offset: int = 0  # steps the learning-rate schedule is shifted by (elastic resizes)
    iterator: Any = None  # the train data positioned at data_position; None = to be made
    resumed: bool = False
    restored_from: str | None = None
    restored_step: int | None = None
    restored_epoch: int | None = None
    loaded_state: dict[str, Any] | None = field(default=None, repr=False)

    def advance(self, count: int, by_epoch: bool) -> None:
        """`count` train steps taken; a complete data epoch is counted (the iterator goes on into the next)."""
        self.step += count
        self.data_position += count
        if not by_epoch:
            self.vals_done = 0  # a new position: its val phases are still to run
        if self.data_position >= self.world.steps_per_epoch:
            self.epoch += 1
            self.data_position = 0
            self.vals_done = 0

    def move_to(self, step: int, epoch: int, data_position: int) -> None:
        """Continue from another position (a resize's broadcast one): the data is positioned anew."""
        if (step, epoch) != (self.step, self.epoch):
            self.vals_done = 0  # rolled back: run the val phases there again rather than skip one
        self.step, self.epoch, self.data_position = step, epoch, data_position
        self.iterator = None

    def phase_epoch(self, partial: bool) -> dict[str, Any]:
        """The epoch a phase's record is filed under: the complete epochs, or for a `partial` phase (a
        stop or a signal cut it short) `"partial": true` and the epoch reached as a fraction (1.4 = 40%
        into the second), rather than the last complete epoch's number, whose record it would repeat."""
        if not partial:
            return {"epoch": self.epoch}
        share = self.data_position / self.world.steps_per_epoch if self.world.steps_per_epoch else 0.0
        return {"epoch": round(self.epoch + share, 4), "partial": True}

    def apply(self, restored: Restored) -> None:
        """Take up a restored position and its origin."""
        self.step, self.epoch, self.data_position = restored.step, restored.epoch, restored.data_position
        self.vals_done = restored.vals_done
        self.resumed = restored.resumed
        self.restored_from, self.loaded_state = restored.path, restored.loaded_state
        self.restored_step, self.restored_epoch = restored.restored_step, restored.restored_epoch


class Read(Generic[T]):
    """A runner attribute that reads its run state (`runner.step` is `runner.run_state.step`):
    callbacks keep reading the runner, and only the runner writes."""

    def __init__(self, *path: str) -> None:
        self.path = path

    @overload
    def __get__(self, runner: None, owner: type) -> Read[T]: ...
    @overload
    def __get__(self, runner: object, owner: type) -> T: ...

    def __get__(self, runner: Any, owner: type) -> T | Read[T]:
        if runner is None:
            return self
        value = runner.run_state
        for name in self.path:
            value = getattr(value, name)
        return cast(T, value)

    def __set__(self, runner: Any, value: T) -> None:
        """Refused: a shadowing instance attribute would leave the run state behind it stale."""
        raise AttributeError(f"runner.{self.path[-1]} is read from runner.run_state, which only the runner changes")
