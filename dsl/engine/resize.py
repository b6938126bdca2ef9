"""Continuing a run with another number of ranks (Horovod elastic).

When ranks leave or join, the batch of each rank changes (`runner.batch_scaling: none`: the
global batch is divided anew) or the global batch does (`linear`: and with it the steps per
epoch and the learning-rate scale) — the same policy at every size (dsl/distributed/scaling.py). The
position inside an epoch is therefore kept as a count of
examples, and the schedule is rebuilt for the new world and shifted so that an
epoch-based run continues at the same point of it instead of replaying or skipping decays.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from dsl.distributed.scaling import scaling_for
from dsl.engine.contracts import Backend, Inputter, Modeler, Topology
from dsl.engine.run_state import World
from dsl.language.errors import DslError
from dsl.language.resolved import Pipeline


class ShiftedSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`schedule(step + offset)`: the optimizer's step count mapped onto another world's steps."""

    def __init__(self, schedule: Any, offset: int) -> None:
        super().__init__()
        self.schedule = schedule
        self.offset = int(offset)

    def __call__(self, step: Any) -> Any:
        return self.schedule(tf.cast(step, tf.int64) + self.offset)

    def get_config(self) -> dict[str, Any]:
        return {"schedule": tf.keras.optimizers.schedules.serialize(self.schedule), "offset": self.offset}


def batches_done(epoch_examples: int, global_batch_size: int, steps_per_epoch: int) -> int:
    """Batches of the current epoch already trained, in the new world's batches.

    Rounds down (a partly trained batch is trained again) and never reaches the end of the
    epoch, so a resized run always has at least one step of the epoch left to take.
    """
    return max(0, min(epoch_examples // global_batch_size, steps_per_epoch - 1))


def schedule_offset(by_epoch: bool, epoch: int, position: int, steps_per_epoch: int, iterations: int) -> int:
    """Steps to add to the optimizer's count so an epoch-based schedule sees the same progress.

    In an epoch-based run the schedule's boundaries were converted with the steps per epoch
    of the world that built it; after a resize the same epoch is reached after another
    number of steps. An iteration-based run counts steps whatever the world, so no shift.
    """
    if not by_epoch:
        return 0
    return epoch * steps_per_epoch + position - iterations


def world_for(pipeline: Pipeline, inputter: Inputter, backend: Topology, previous: World) -> World:
    """The world at the backend's size now: the same policy at every size (dsl/distributed/scaling.py) —
    a global batch divided anew, or a per-rank batch whose growth rescales the learning rate —
    and batch-norm synchronisation decided again for the new per-replica batch."""
    scaling = scaling_for(pipeline, backend.replicas_in_step(), backend.asynchronous_workers())
    size = backend.placement.world_size
    batch_norm = previous.batch_norm.at(scaling.batch_size, scaling.replicas) if previous.batch_norm else None
    return World(size, scaling, inputter.steps_per_epoch(scaling.batch_size, size) or 0, batch_norm)


def resync_batch_norm(backend: Backend, model: Any, world: World) -> None:
    """Batch-norm synchronisation decided again at the new size (dsl/distributed/sync_batch_norm.py): the
    backend switches the layers it prepared, traced again with the step functions."""
    if world.batch_norm is None:
        return
    if backend.prepare_model(model, world.batch_norm) is not model:
        raise DslError(f"{backend.describe()} rebuilt the network at a resize: its batch-norm layers "
                       f"cannot change mid-run; set runner.{world.batch_norm.switch}: true or false")


def shifted_schedule(modeler: Modeler, world: World, offset: int) -> Any:
    """The learning rate of `world`, its schedule shifted by `offset` steps (see `schedule_offset`)."""
    schedule = modeler.learning_rate(world.steps_per_epoch, world.scaling.lr_factor)
    return ShiftedSchedule(schedule, offset) if offset else schedule
