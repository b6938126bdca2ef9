"""One model on every replica: the state each replica updates from its own data is averaged.

Gradients are averaged by the backend before they are applied, so trainable weights stay
equal on every rank. Some state is updated in the forward pass instead, from the rank's
own batch: BatchNormalization's moving mean and variance, and any other non-trainable
variable a layer keeps. Left alone, every rank ends up with statistics of its own shard,
validates with them, and rank 0 checkpoints only its own.

These variables are therefore replaced by their average over the replicas (one fused
allreduce, `make_reconcile_call`), but only when something reads them, not after every
call: a moving average is linear in the batches it has seen (and the training forward pass
never reads it), so averaging at the reads gives the same statistics as averaging after
every call, to rounding (tests/test_replica_state_reads.py: 1e-6 on 2 Horovod ranks and 2
collective workers). Averaging after every call cost a visible share of a 2-rank run's
throughput (issue 29; the figures are in docs/benchmarks.md).

The average is a collective, so every rank must ask for it at the same point: the runner
averages after the calls where the ranks agree on stopping (dsl.engine.stop_agreement: every
16 steps and at every phase's end, so before every val phase, epoch checkpoint, save_best,
the end of the run, the digest and a stop's checkpoint), after the calls where a callback
declares a read that depends only on the step (`Callback.reads_replica_state`: the
`checkpoint` callback's `every_n_iters`), before an elastic commit, and once after the first
call of a world (so the average's tracing and first run fall in the warm-up). A read at a
rank-local moment (stop_at_time's own checkpoint) sees the chief's statistics of the steps
since the last average (at most 15 at one step per call); the run's last checkpoint, saved
after the agreed stop, is averaged.
TensorFlow's MirroredStrategy averages its BatchNormalization variables when they are read,
too (aggregation MEAN, sync on read).

The average of unequal per-rank variances is not the variance of the whole batch; for
small per-rank batches the backend's `sync_batch_norm` (on by default below 16 examples per
replica, dsl/distributed/sync_batch_norm.py) computes the batch statistics over all ranks instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import cast

import tensorflow as tf

from dsl.engine.contracts import Average, Communication


def replica_local_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """The model's variables that each replica updates itself: floating-point, non-trainable,
    in a layer that trains.

    A frozen layer's variables never change, so they are equal everywhere already and are
    left out (averaging equal values over 3 ranks can still move them by a rounding error).
    Read when the train call is traced, after callbacks like `init_checkpoint` froze layers.
    """
    frozen = {v.ref() for layer in model.submodules
              if isinstance(layer, tf.keras.layers.Layer) and not layer.trainable for v in layer.variables}
    chosen, seen = [], set()
    for variable in model.non_trainable_variables:
        if variable.dtype.is_floating and variable.ref() not in frozen and variable.ref() not in seen:
            seen.add(variable.ref())
            chosen.append(variable)
    return chosen


def has_batch_norm(model: tf.keras.Model) -> bool:
    """Whether the built network normalises batches (what `sync_batch_norm: auto` asks of it)."""
    return any(isinstance(layer, tf.keras.layers.BatchNormalization) for layer in model.submodules)


def reconcile(variables: list[tf.Variable], average: Average) -> None:
    """Set every variable to its average over the replicas (inside a compiled call)."""
    if not variables:
        return
    for variable, value in zip(variables, average([v.read_value() for v in variables])):
        variable.assign(value)


def make_reconcile_call(model: tf.keras.Model, average: Average,
                        strategy: tf.distribute.Strategy | None = None) -> Callable[[], None]:
    """A compiled call setting the model's replica-local variables to their average over the
    replicas; every rank must call it at the same point (the runner's read points, above).

    With a `strategy` the average runs in its replica context, as the train step does. The
    variables are chosen at the first call, after callbacks like `init_checkpoint` froze layers.
    """

    def reconcile_replicas() -> None:
        reconcile(replica_local_variables(model), average)

    @tf.function
    def reconcile_call() -> None:
        if strategy is None:
            reconcile_replicas()
        else:
            strategy.run(reconcile_replicas)

    return cast(Callable[[], None], reconcile_call)  # tf.function is untyped


class ReplicaState:
    """The runner's view of the replica-local state: whether a train call changed it since the
    last average, and the backend's call that averages it (None with one replica)."""

    def __init__(self) -> None:
        self.call: Callable[[], None] | None = None
        self.differ = self.started = False

    def use(self, call: Callable[[], None] | None) -> None:
        """A new world (new calls) starts from one broadcast state."""
        self.call, self.differ, self.started = call, False, False

    def after_call(self, read: bool) -> None:
        """A train call changed the state; average it now when `read` (the same on every rank).

        The first call of a world averages too (every rank makes it), so the average's tracing
        and first run (about a second of CPU under Horovod) fall in the first step with the
        train call's, not in the middle of training at the first read.
        """
        self.differ = True
        if read or not self.started:
            self.started = True
            self.average()

    def average(self) -> None:
        """Average it if it changed; every rank calls this at the same point (a collective)."""
        if self.call is not None and self.differ:
            self.call()
        self.differ = False


def weights_digest(model: tf.keras.Model) -> str:
    """SHA-256 of every model variable's bytes: equal digests mean identical weights (the
    end-of-run check that every replica holds one model)."""
    digest = hashlib.sha256()
    for variable in model.variables:
        digest.update(variable.name.encode())
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()


def replicas_agree(backend: Communication, model: tf.keras.Model) -> tuple[bool, str]:
    """Whether every replica ended with the same weights, and a line saying so or which differ."""
    digests: list[str] = backend.gather_strings(weights_digest(model))
    if len(set(digests)) == 1:
        return True, f"weights digest {digests[0][:16]} identical on all {len(digests)} ranks"
    differing = [rank for rank, d in enumerate(digests) if d != digests[0]]
    return False, f"the ranks ended with different weights (ranks {differing} differ from rank 0)"
