"""Horovod elastic: the runner's workflow survives ranks that leave and ranks that join.

Under `horovodrun --min-np N --max-np M --host-discovery-script SCRIPT` (Gloo), Horovod sets
HOROVOD_ELASTIC=1 and the workflow runs inside `hvd.elastic.run`:

- every `runner.elastic.commit_every_n_steps` train steps the state (model, optimizer,
  RNG, position; batch-norm statistics averaged first) is committed to host memory, and
  Horovod checks whether hosts were added;
- when a rank fails, the collective in flight raises on the survivors: they roll back to
  the last commit, Horovod re-forms the ring from the ranks left, and training goes on;
- when the discovery script lists a new host, its rank starts, and at the next commit
  every rank resets to the larger world;
- after every reset rank 0's committed state is broadcast to all ranks (new ones
  included) and the runner adapts to the world: shards, steps per epoch, learning rate.

Imports Horovod and TensorFlow: import it only from HorovodBackend.run_training.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
from horovod.common.elastic import ObjectState
from horovod.common.exceptions import HorovodInternalError

from dsl.engine.contracts import ElasticRunner, RunnerView
from dsl.engine.hooks import Callback
from dsl.language.errors import DslError


class ElasticHorovod(Protocol):
    """What the elastic loop uses of backends.horovod.HorovodBackend (which imports this module)."""

    hvd: Any
    elastic: dict[str, Any] | None

    def refresh_placement(self) -> None: ...


class TrainingState(ObjectState):
    """The runner's variables and position, as Horovod's elastic state.

    Horovod's TensorFlowKerasState calls `optimizer.variables()`, which Keras 2.11+
    optimizers no longer have, and its TensorFlowState does not broadcast in eager mode; so
    this state keeps numpy copies of the variables itself and broadcasts them on sync. The
    position travels as ObjectState attributes (step, epoch, epoch_examples).
    """

    def __init__(self, runner: ElasticRunner, hvd: Any) -> None:
        self._runner = runner
        self._hvd = hvd
        self._variables = runner.state_variables()
        self._values = self._copy()
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **runner.position())

    def capture(self) -> None:
        """Take the runner's current position (before a commit), its batch-norm statistics averaged:
        a reset resumes every rank from rank 0's commit (dsl/engine/replicas.py)."""
        self._runner.replica_state.average()
        for key, value in self._runner.position().items():
            setattr(self, key, value)

    def save(self) -> None:
        self._values = self._copy()
        super().save()

    def restore(self) -> None:
        for variable, value in zip(self._variables, self._values):
            variable.assign(value)
        super().restore()

    def sync(self) -> None:
        # hvd.elastic.run syncs before every (re)entry, outside the function it wraps: a rank lost
        # during these broadcasts must take the elastic path as a loss during training does.
        with lost_ranks_reset():
            self._hvd.broadcast_variables(self._variables, root_rank=0)
            self._values = self._copy()
            super().sync()

    def _copy(self) -> list[np.ndarray[Any, Any]]:
        return [np.array(variable.numpy(), copy=True) for variable in self._variables]


class Commit(Callback):
    """Commits the elastic state every N train steps (after every other callback of the call)."""

    priority = 101  # after LOWEST (100): the commit is the last thing a call does

    def __init__(self, state: TrainingState, every: int) -> None:
        super().__init__({"type": "elastic_commit"})
        self.state = state
        self.every = every
        self.next_step = every

    def restart(self, step: int) -> None:
        self.next_step = (step // self.every + 1) * self.every

    def after_train_iter(self, runner: RunnerView) -> None:
        if runner.step >= self.next_step:
            self.state.capture()
            self.state.commit()  # raises HostsUpdatedInterrupt when hosts were added or removed
            self.restart(runner.step)


class _NotHorovod(Exception):
    """Carries a TensorFlow error past hvd.elastic.run, which would swallow an UnknownError."""

    def __init__(self, error: tf.errors.OpError) -> None:
        super().__init__(str(error))
        self.error = error


# What a Horovod collective's error says when a peer is gone: Horovod's shut-down status names
# Horovod, a failure inside the transfer carries Gloo's own message (its source path, e.g.
# `gloo/transport/tcp/pair.cc`), and a compiled call names the failing node (`HorovodAllgather_...`).
_LOST_PEER = re.compile(r"Horovod|gloo/")


@contextmanager
def lost_ranks_reset() -> Iterator[None]:
    """Every collective of an elastic run goes through here: a TensorFlow error from a lost peer
    becomes HorovodInternalError (hvd.elastic.run rolls back to the commit and re-forms the
    ranks); any other TensorFlow error is carried past hvd.elastic.run to the runner's report."""
    try:
        yield
    except tf.errors.OpError as exc:
        if _LOST_PEER.search(exc.message or ""):
            raise HorovodInternalError(exc) from exc
        raise _NotHorovod(exc) from exc


def run_elastic(backend: ElasticHorovod, runner: ElasticRunner, train: Callable[[], None]) -> None:
    """Run `train` under hvd.elastic.run until it finishes with the ranks there are then."""
    hvd = backend.hvd
    settings = backend.elastic
    assert settings is not None, "run_elastic is called for an elastic job only"
    state = TrainingState(runner, hvd)
    commit = Commit(state, int(settings["commit_every_n_steps"]))
    runner.add_callback(commit)
    resets = [0]

    def on_reset() -> None:
        resets[0] += 1
        backend.refresh_placement()

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def elastic_train(state: TrainingState) -> None:
        with lost_ranks_reset():
            runner.enter_world(state.step, state.epoch, state.epoch_examples)
            commit.restart(runner.step)
            _check_world(runner, settings, resets[0])
            train()

    try:
        elastic_train(state)
    except _NotHorovod as wrapped:
        raise wrapped.error from None


def _check_world(runner: ElasticRunner, settings: dict[str, Any], resets: int) -> None:
    """Say how many ranks train now; stop (saving the committed state) outside the set range."""
    size = runner.placement.world_size
    low, high = settings["min_workers"], settings["max_workers"]
    if resets:
        synced = runner.batch_norm_sync.describe() if runner.batch_norm_sync else ""
        runner.notice(f"elastic: the ranks changed; continuing from the commit at step {runner.step} "
                      f"with {size} rank(s): {runner.scaling.describe()}, {runner.steps_per_epoch} steps per epoch"
                      + (f", {synced}" if synced else ""))
    else:
        runner.notice(f"elastic: training with {size} rank(s), committing every {settings['commit_every_n_steps']} steps")
    if size < low or (high is not None and size > high):
        where = runner.save_checkpoint()
        wanted = f"{low}..{high}" if high is not None else f"at least {low}"
        raise DslError(
            f"elastic: {size} rank(s) now, but runner.elastic wants {wanted}; stopping"
            + (f" (the committed state is saved in {where})" if where else "")
            + "; give horovodrun --min-np/--max-np the same range as runner.elastic"
        )
