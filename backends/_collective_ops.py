"""What the collective backend does with TensorFlow: the cluster, the variables, the all-reduces.

Imports TensorFlow: import this module only from inside functions of backends/collective.py.

Why the variables are changed on creation: under MultiWorkerMirroredStrategy, Keras creates
batch-norm moving statistics and metric totals as *sync-on-read* variables, whose value in
cross-replica context is an all-reduce across the workers. dslrun's loop reads them on the
chief alone (checkpoints, save_best, export): the chief would wait in a collective the other
workers never join. `local_replica_variables` makes them mirrored variables that each replica
updates from its own data (aggregation NONE: no communication in the step), exactly what
they are under Horovod; the shared train call then averages the model's statistics at the
end of every call (dsl/engine/replicas.py) and the metrics are summed from
every worker's state (`sum_across_ranks`, dsl/engine/metric_reduction.py).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

_IMPLEMENTATIONS = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}


def configure_threads(local_size: int, intra_op: int | None, inter_op: int | None) -> None:
    """N processes of one host each using every core fight over them: one share each
    (measured for Horovod in docs/benchmarks.md). Must run before the strategy starts TF."""
    if tf.config.list_physical_devices("GPU"):
        return
    import os

    share = max(1, (os.cpu_count() or 1) // max(1, local_size))
    tf.config.threading.set_intra_op_parallelism_threads(intra_op or share)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op or max(1, min(2, share)))


def on_cpus() -> bool:
    """No GPU here: the processes of this host share its cores."""
    return not tf.config.list_physical_devices("GPU")


def pin_gpu(local_rank: int) -> None:
    """One GPU per process (the process's index among the tasks of its host)."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = gpus[local_rank % len(gpus)]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")


def _coordination_config_pb2() -> Any:
    """The CoordinatedJob message's module, which has moved between TensorFlow releases.

    TensorFlow has no public API for it; its home was `tensorflow.tsl.protobuf` up to 2.15 and is
    `tensorflow.compiler.xla.tsl.protobuf` in 2.16-2.21 (tsl moved under XLA).
    """
    for module in ("tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2",
                   "tensorflow.tsl.protobuf.coordination_config_pb2",
                   "tsl.protobuf.coordination_config_pb2"):
        try:
            return importlib.import_module(module)
        except ImportError:
            continue
    raise ImportError("TensorFlow's coordination_config_pb2 (CoordinatedJob) was not found: "
                      "dslrun's collective backend supports TensorFlow 2.21 (make install)")


def make_strategy(cluster: dict[str, list[str]], communication: str, timeout_seconds: float | None,
                  heartbeat_seconds: float) -> tf.distribute.MultiWorkerMirroredStrategy:
    """The strategy for the TF_CONFIG cluster, with its failure detection set.

    The coordination service (led by the first task) takes heartbeats from every task; a task
    silent for `heartbeat_seconds` is declared lost and every other task's collectives fail
    with an error naming it. `timeout_seconds` bounds each collective as well (null: no bound).
    """
    coordination_config_pb2 = _coordination_config_pb2()
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
            for job in ("chief", "worker") if cluster.get(job)]
    leader = "/job:chief/replica:0/task:0" if cluster.get("chief") else "/job:worker/replica:0/task:0"
    from tensorflow.python.eager import context  # the public API cannot set the heartbeat

    context.context().configure_coordination_service(
        service_type="standalone", service_leader=leader, coordinated_jobs=jobs,
        heartbeat_timeout_in_ms=int(heartbeat_seconds * 1000),
        shutdown_barrier_timeout_in_ms=int(heartbeat_seconds * 1000),
    )
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=_IMPLEMENTATIONS[communication], timeout_seconds=timeout_seconds or None)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    # Every rank takes exactly the same number of full steps (dsl.engine.compiler.steps_per_epoch),
    # so the per-step "does every worker still have data" all-reduce is not needed; batch norm then
    # also keeps its fused kernel, as under Horovod.
    strategy.extended.experimental_enable_get_next_as_optional = False
    return strategy


@contextlib.contextmanager
def local_replica_variables() -> Iterator[None]:
    """Inside a strategy scope: sync-on-read variables become replica-local mirrored ones (see above)."""

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        if (kwargs.get("synchronization") == tf.VariableSynchronization.ON_READ
                and kwargs.get("aggregation") != tf.VariableAggregation.ONLY_FIRST_REPLICA):
            kwargs["synchronization"] = tf.VariableSynchronization.ON_WRITE
            kwargs["aggregation"] = tf.VariableAggregation.NONE
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def average_in_replica(tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    """Element-wise mean over every replica; called in a replica context (one packed all-reduce)."""
    context = tf.distribute.get_replica_context()
    return list(context.all_reduce(tf.distribute.ReduceOp.MEAN, list(tensors)))


class HostCollectives:
    """Eager all-reduces between the processes, for the loop's agreements (not per step).

    Each is a sum: a broadcast is the chief's values plus zeros, a gather is every rank's
    row of an otherwise zero matrix. Sums of a value and zeros are exact, so a broadcast
    copies the chief's bits.
    """

    def __init__(self, strategy: tf.distribute.Strategy, rank: int, world_size: int) -> None:
        self.strategy = strategy
        self.rank = rank
        self.world_size = world_size

    def sum(self, values: list[tf.Tensor]) -> list[tf.Tensor]:
        """Each tensor summed over the processes: packed into one flat tensor per dtype, one all-reduce."""
        if not values:
            return []
        flat = tf.concat([tf.reshape(value, [-1]) for value in values], axis=0)
        summed = self.strategy.experimental_local_results(self.strategy.run(_all_reduce_sum, args=(flat,)))[0]
        sizes = [int(tf.size(value)) for value in values]
        return [tf.reshape(part, value.shape) for part, value in zip(tf.split(summed, sizes), values)]

    def broadcast(self, variables: list[tf.Variable]) -> None:
        chief = self.rank == 0
        values = [v.read_value() if chief else tf.zeros_like(v.read_value()) for v in variables]
        by_dtype: dict[tf.DType, list[int]] = {}
        for index, value in enumerate(values):
            by_dtype.setdefault(_reducible(value.dtype), []).append(index)
        for dtype, indices in by_dtype.items():
            summed = self.sum([tf.cast(values[i], dtype) for i in indices])
            for index, value in zip(indices, summed):
                variables[index].assign(tf.cast(value, variables[index].dtype))

    def gather(self, row: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """[world_size, len(row)]: every rank's `row` (int64 or float64)."""
        matrix = np.zeros((self.world_size, row.size), dtype=row.dtype)
        matrix[self.rank] = row
        gathered: np.ndarray[Any, Any] = self.sum([tf.constant(matrix)])[0].numpy()
        return gathered


@tf.function
def _all_reduce_sum(flat: tf.Tensor) -> tf.Tensor:
    # An op in the replica function places the value on the replica's device: the function's
    # input itself has none, and the all-reduce refuses a value without a device.
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(flat))


def _reducible(dtype: tf.DType) -> tf.DType:
    """Collectives on CPU sum float32/64 and int32/64; other types travel as int64 or float32."""
    if dtype in (tf.float32, tf.float64, tf.int32, tf.int64):
        return dtype
    if dtype.is_floating:
        return tf.float32
    return tf.int64
