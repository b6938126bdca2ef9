"""TensorFlow's own allreduce: `runner.backend: collective` (MultiWorkerMirroredStrategy).

The same promises as the Horovod backend, with no build step: one process per host (or per
GPU), each training on its own shard of the data; the optimizer sums the gradients of every
replica (ring or NCCL all-reduce) so every process applies the same update; every process
starts from the chief's variables; batch-norm statistics are averaged where they are read
(dsl/engine/replicas.py; or synchronised in every step with
`runner.collective.sync_batch_norm`); the chief alone writes
the run directory. The loop, the step and the hooks are the shared ones (dsl/engine/steps.py
runs the step with `strategy.run`).

The cluster comes from TF_CONFIG, as for the ps backend: `{"cluster": {"worker": [...]},
"task": {"type": "worker", "index": i}}` (a `chief` job may name the first task instead).
`dslrun launch --backend collective --workers N` starts such a cluster on this machine.

A lost process: the coordination service, led by the first task, expects a heartbeat from
every task; one silent for `runner.collective.heartbeat_timeout_seconds` is declared lost and
the collectives of the others fail with its name, so the job ends instead of hanging (and
`timeout_seconds` bounds every collective, for a task alive but stuck).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from collections.abc import Callable, Mapping
from typing import Any

from backends._tf_config import parse_tf_config
from backends.base import Backend
from dsl.distributed.busy_host import say_busy_host
from dsl.distributed.sync_batch_norm import BatchNormSync
from dsl.engine.contracts import ReconcileCall, StepCall, StepParts
from dsl.language.context import Placement
from dsl.language.errors import DslError

_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")


def read_cluster(environ: Mapping[str, str] | None = None) -> tuple[dict[str, list[str]], str, int]:
    """(cluster, task type, task index) of an all-reduce cluster from TF_CONFIG, or a clear error."""
    cluster, task_type, task_index = parse_tf_config(
        environ,
        "runner.backend is collective but TF_CONFIG is not set: start the workers here with "
        "`dslrun launch --backend collective --workers 2 FILE`, or set TF_CONFIG on every host, e.g. "
        '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}',
        '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}',
    )
    extra = sorted(set(cluster) - {"chief", "worker"})
    if extra or task_type not in ("chief", "worker"):
        raise DslError(
            f"TF_CONFIG describes a {'/'.join(extra) or task_type} task, which the collective backend does not have: "
            "its cluster holds `worker` tasks (and at most one `chief`); for parameter servers set runner.backend: ps"
        )
    if len(cluster.get("chief", [])) > 1:
        raise DslError("TF_CONFIG's cluster has more than one chief task; name one chief, or only workers")
    if task_index >= len(cluster.get(task_type, [])):
        raise DslError(f"TF_CONFIG task {task_type}:{task_index} is not in the cluster "
                       f"({len(cluster.get(task_type, []))} {task_type} task(s))")
    return cluster, task_type, task_index


def task_order(cluster: dict[str, list[str]]) -> list[tuple[str, int]]:
    """Every task as (type, index) in rank order: the chief (when named) first, then the workers."""
    return [("chief", 0)] * bool(cluster.get("chief")) + [("worker", i) for i in range(len(cluster.get("worker", [])))]


def task_label(task_type: str, index: int) -> str:
    return "chief" if task_type == "chief" else f"worker:{index}"


class CollectiveBackend(Backend):
    """Synchronous data parallelism with `tf.distribute.MultiWorkerMirroredStrategy`."""

    name = "collective"
    averages_in_step = True

    def __init__(self, runner_params: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(runner_params)
        self.settings: dict[str, Any] = dict(self.runner_params.get("collective") or {})
        self.environ = os.environ if environ is None else environ
        self.cluster: dict[str, list[str]] = {}
        self.task: tuple[str, int] = ("worker", 0)
        self.strategy: Any = None
        self._host: Any = None  # _collective_ops.HostCollectives

    # ------------------------------------------------------------------------ set-up
    def setup(self) -> None:
        self.cluster, task_type, task_index = read_cluster(self.environ)
        self.task = (task_type, task_index)
        order = task_order(self.cluster)
        rank = order.index(self.task)
        hosts = [self._address(t).rsplit(":", 1)[0] for t in order]
        local = [i for i, host in enumerate(hosts) if host == hosts[rank]]
        self.placement = Placement(rank=rank, world_size=len(order), local_rank=local.index(rank))

        from backends import _collective_ops as ops

        ops.pin_gpu(self.placement.local_rank)
        ops.configure_threads(len(local), self.runner_params.get("intra_op_threads"),
                              self.runner_params.get("inter_op_threads"))
        if rank == 0 and ops.on_cpus():
            say_busy_host(len(local))
        try:
            self.strategy = ops.make_strategy(
                self.cluster, self.settings.get("communication", "auto"), self.settings.get("timeout_seconds"),
                float(self.settings.get("heartbeat_timeout_seconds", 20)),
            )
        except Exception as exc:  # TensorFlow raises several types when the cluster cannot form
            raise DslError(f"the collective cluster could not start on {self.describe()}: {_first_line(exc)}") from None
        replicas = self.strategy.num_replicas_in_sync
        if replicas != self.placement.world_size:
            raise DslError(
                f"the collective backend runs one replica per process, but this cluster of {self.placement.world_size} "
                f"process(es) has {replicas} replicas (several GPUs per process?): start one process per GPU"
            )
        self._host = ops.HostCollectives(self.strategy, rank, len(order))

    def _address(self, task: tuple[str, int]) -> str:
        return self.cluster[task[0]][task[1]]

    # ----------------------------------------------------------------- loop interface
    def scope(self) -> contextlib.AbstractContextManager[Any]:
        from backends._collective_ops import local_replica_variables

        stack = contextlib.ExitStack()
        stack.enter_context(self.strategy.scope())
        stack.enter_context(local_replica_variables())
        return stack

    def replicas_in_step(self) -> int:
        return self.placement.world_size

    def make_train_call(self, parts: StepParts) -> StepCall:
        from dsl.engine.steps import make_train_call

        call = make_train_call(parts.model, parts.modeler, parts.optimizer, parts.metrics["train"],
                               self.wrap_tape, parts.jit_compile, parts.traces, strategy=self.strategy,
                               replicas=self.step_replicas(), steps_per_call=parts.steps_per_call)
        return _Explained(call, self)

    def make_reconcile_call(self, parts: StepParts) -> ReconcileCall | None:
        from dsl.engine.replicas import make_reconcile_call

        return _Explained(make_reconcile_call(parts.model, self.average_across_replicas, self.strategy), self)

    def make_val_call(self, parts: StepParts) -> StepCall:
        return _Explained(super().make_val_call(parts), self)

    def prepare_model(self, model: Any, batch_norm: BatchNormSync) -> Any:
        if not batch_norm.on:
            return model
        import tensorflow as tf

        from backends._sync_batch_norm import convert_batch_norm

        def synchronized(**config: Any) -> Any:
            return tf.keras.layers.BatchNormalization(**{**config, "synchronized": True})

        return convert_batch_norm(model, synchronized, setting="runner.collective.sync_batch_norm")

    def average_across_replicas(self, tensors: list[Any]) -> list[Any]:
        from backends._collective_ops import average_in_replica

        return average_in_replica(tensors)

    def broadcast(self, variables: list[Any]) -> None:
        self._explain(self._host.broadcast, variables)

    def sum_across_ranks(self, arrays: list[Any]) -> list[Any]:
        import tensorflow as tf

        if not arrays:
            return []
        summed = self._explain(self._host.sum, [tf.constant(array, tf.float64) for array in arrays])
        return [tensor.numpy() for tensor in summed]

    def gather_objects(self, value: Any) -> list[Any]:
        return [pickle.loads(data) for data in self._gather_bytes(pickle.dumps(value))]

    def max_across_ranks(self, value: int) -> int:
        import numpy as np

        return int(self._explain(self._host.gather, np.array([value], dtype=np.int64)).max())

    def gather_strings(self, value: str) -> list[str]:
        return [data.decode() for data in self._gather_bytes(value.encode())]

    def _gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data`, in rank order: a row [length, data as int64 words] per rank,
        padded to the longest (the host collectives gather int64 rows exactly)."""
        import numpy as np

        words = -(-len(data) // 8)
        longest = self.max_across_ranks(words)
        row = np.zeros(longest + 1, dtype=np.int64)
        row[0] = len(data)
        row[1:1 + words] = np.frombuffer(data.ljust(words * 8, b"\0"), dtype=np.int64)
        rows = self._explain(self._host.gather, row)
        return [r[1:].tobytes()[:int(r[0])] for r in rows]

    def describe(self) -> str:
        task = task_label(*self.task)
        return (f"collective ({self.placement.world_size} workers, {task} at {self._address(self.task)}, "
                f"rank {self.placement.rank})") if self.cluster else "collective"

    # ------------------------------------------------------------------------ failures
    def _explain(self, function: Callable[..., Any], *args: Any) -> Any:
        import tensorflow as tf

        try:
            return function(*args)
        except tf.errors.OpError as exc:
            raise self.lost(exc) from None

    def lost(self, exc: Exception) -> DslError:
        """A failed collective as one line naming the task the coordination service lost."""
        message = _first_line(exc)
        full = getattr(exc, "message", None) or str(exc)
        mine = f"/job:{self.task[0]}/replica:0/task:{self.task[1]}"
        named = [m for m in _TASK.finditer(full) if m.group(0) != mine]
        if named:
            lost = task_label(named[0].group(1), int(named[0].group(2)))
            address = self.cluster.get(named[0].group(1), [])[int(named[0].group(2)):][:1]
            where = f"{lost} ({address[0]})" if address else lost
            head = f"lost {where}: the collective cluster cannot go on without it"
        else:
            head = "a collective operation between the workers failed"
        return DslError(f"{head} ({message}); this is {task_label(*self.task)}. Run the same command on every "
                        "host again to resume from the last checkpoint")


class _Explained:
    """A compiled call whose collective failures name the lost task (see CollectiveBackend.lost)."""

    def __init__(self, call: Any, backend: CollectiveBackend) -> None:
        self._call = call
        self._backend = backend

    def __call__(self, *args: Any) -> Any:
        import tensorflow as tf

        try:
            return self._call(*args)
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                tf.errors.DeadlineExceededError, tf.errors.InternalError) as exc:
            raise self._backend.lost(exc) from None

    def get_concrete_function(self, *args: Any) -> Any:
        return self._call.get_concrete_function(*args)


def _first_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
    return message.strip().splitlines()[0][:300]
