"""Continuing a run with another number of ranks (Horovod elastic).

When ranks leave or join, the batch of each rank changes (`runner.batch_scaling: none`: the
global batch is divided anew) or the global batch does (`linear`: and with it the steps per
epoch and the learning-rate scale) — the same policy at every size (dsl/scaling.py). The
position inside an epoch is therefore kept as a count of
examples, and the schedule is rebuilt for the new world and shifted so that an
epoch-based run continues at the same point of it instead of replaying or skipping decays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import tensorflow as tf

from dsl.engine.compiler import steps_per_epoch as count_steps_per_epoch
from dsl.engine.rundir import MetricsFile
from dsl.scaling import scaling_for

if TYPE_CHECKING:
    from dsl.engine.runner import Runner


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


def enter_world(runner: Runner, step: int, epoch: int, epoch_examples: int) -> None:
    """See `Runner.enter_world`: continue from a broadcast position with the ranks there are now."""
    world = runner.placement.world_size
    resized = world != runner.world_built
    if resized:
        runner.world_built = world
        # The same policy at the new size: a global batch divided anew, or a per-rank batch
        # whose growth rescales the learning rate (dsl/scaling.py).
        runner.scaling = scaling_for(runner.pipeline, runner.backend.replicas_in_step())
        runner.batch_size = runner.data.batch_size = runner.scaling.batch_size
        runner.global_batch_size = runner.batch_size * world
        runner.steps_per_epoch = count_steps_per_epoch(
            runner.inputter.num_examples("train"), runner.batch_size, world, runner.drop_remainder
        ) or 0
        runner.context.steps_per_epoch = runner.steps_per_epoch
        runner.data.check(runner.steps_per_epoch, world)
    if (step, epoch) != (runner.step, runner.epoch):
        runner.vals_done = 0  # rolled back: run the val phases there again rather than skip one
    runner.step, runner.epoch = step, epoch
    runner.data_position = batches_done(epoch_examples, runner.global_batch_size, runner.steps_per_epoch)
    runner.iterator = None
    # From the broadcast position, so that a rank that joined (built for this world, never
    # shifted) and the survivors (rebuilt at every resize) follow one schedule.
    offset = schedule_offset(runner.by_epoch, epoch, runner.data_position, runner.steps_per_epoch,
                             int(runner.optimizer.iterations.numpy()))
    if resized or offset != runner.schedule_offset:
        runner.schedule_offset = offset
        schedule = runner.modeler.learning_rate(runner.steps_per_epoch, runner.scaling.lr_factor)
        runner.optimizer.learning_rate = ShiftedSchedule(schedule, offset) if offset else schedule
        runner.compile_calls()
    _take_up_role(runner)


def _take_up_role(runner: Runner) -> None:
    """After a world change, a rank that became the chief (rank 0's host was lost) writes the
    metrics and runs the chief-only callbacks' `before_run` it skipped at the start."""
    if runner.placement.is_chief and runner.metrics_file is None:
        runner.metrics_file = MetricsFile(runner.model_dir, runner.metrics_format)
    if runner.placement.is_chief:
        runner.callback_list.start_skipped(runner)
