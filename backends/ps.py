"""Parameter servers: variables live apart from the computation (`runner.backend: ps`).

Two styles, both on TensorFlow's own tf.distribute engine:

- `runner.ps.mode: central_storage` (one machine, Lambda's parameter_server_runner):
  `CentralStorageStrategy` keeps the variables on the CPU and replicates the step on the
  local GPUs; gradients are summed over the replicas of a global batch. On a machine
  without GPUs it trains on the CPU alone and says so.
- `runner.ps.mode: cluster` (TensorLayer's distributed session): `ParameterServerStrategy` +
  `ClusterCoordinator`, the cluster described by TF_CONFIG. Every task runs the same
  command; `ps` and `worker` tasks serve (they never return from `setup`), the `chief` runs
  the shared loop and schedules train steps on the workers, the `evaluator` evaluates each
  checkpoint the chief writes (dsl.engine.watch). `dslrun launch --backend ps` starts such a
  cluster on one machine.

Cluster semantics, honestly stated:
- Training is asynchronous: each step is one worker's update with one batch of
  `inputter.batch_size`, so a "step" and an "epoch" (train examples / batch size steps)
  mean what they mean on one process, but the workers' updates interleave.
- Each worker reads its own shard of the train data (sharded before shuffling), repeated:
  workers that are faster take more steps, so an epoch is about one pass, not exactly one.
- Validation runs on the chief, over the whole val set, reading the variables from the ps.
- Resume restores model, optimizer, step and epoch from the chief's checkpoint; the exact
  position inside an epoch cannot be restored across workers (each worker skips the same
  number of batches of its own shard, an approximation).
- A worker that fails is retried by the coordinator (its steps are re-scheduled when it is
  back); a ps or the chief failing ends the job, and running the same command resumes
  from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from backends._tf_config import parse_tf_config
from backends.base import Backend
from dsl.engine.contracts import Evaluator, ReconcileCall, StepCall, StepParts
from dsl.language.context import Placement
from dsl.language.errors import DslError

ROLES = ("chief", "worker", "ps", "evaluator")


def read_tf_config(environ: Mapping[str, str] | None = None) -> tuple[dict[str, list[str]], str, int]:
    """(cluster, task type, task index) from TF_CONFIG; a clear error when it is missing or wrong."""
    cluster, task_type, task_index = parse_tf_config(
        environ,
        "runner.ps.mode is cluster but TF_CONFIG is not set: start a local cluster with "
        "`dslrun launch --backend ps --workers 2 --ps 1 FILE`, set TF_CONFIG on every task of a real "
        "cluster, or set runner.ps.mode: central_storage to train on one machine",
        '{"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]}, "task": {"type": "worker", "index": 0}}',
    )
    if task_type not in ROLES:
        raise DslError(f"TF_CONFIG task type {task_type!r} is not one of {', '.join(ROLES)}")
    missing = [job for job in ("chief", "worker", "ps") if not cluster.get(job)]
    if missing:
        raise DslError(f"TF_CONFIG's cluster has no {' and no '.join(missing)} task: a ps cluster needs chief, worker and ps")
    if task_type != "evaluator" and task_index >= len(cluster[task_type]):
        raise DslError(f"TF_CONFIG task {task_type}:{task_index} is not in the cluster ({len(cluster[task_type])} {task_type} task(s))")
    return cluster, task_type, task_index


class ParameterServerBackend(Backend):
    """`runner.backend: ps`, in the mode `runner.ps.mode` names."""

    name = "ps"

    def __init__(self, runner_params: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(runner_params)
        self.settings: dict[str, Any] = dict(self.runner_params.get("ps") or {})
        self.mode: str = self.settings.get("mode", "cluster")
        self.environ = os.environ if environ is None else environ
        self.role = "chief"
        self.task_index = 0
        self.cluster: dict[str, list[str]] = {}
        self.strategy: Any = None
        self.coordinator: Any = None
        self._sharding: tuple[Any, Any] = (1, 0)

    # ------------------------------------------------------------------------ set-up
    def setup(self) -> None:
        if self.mode == "central_storage":
            self._setup_central_storage()
            return
        self.cluster, self.role, self.task_index = read_tf_config(self.environ)
        if self.role in ("worker", "ps"):
            self._serve()  # never returns
        if self.role == "chief":
            self._setup_chief()

    def _setup_central_storage(self) -> None:
        import tensorflow as tf

        self.strategy = tf.distribute.experimental.CentralStorageStrategy()
        replicas = self.strategy.num_replicas_in_sync
        if not tf.config.list_physical_devices("GPU"):
            _notice("ps central_storage: no GPU on this machine, so variables and the step share one device "
                    "(the CPU); on a GPU machine the step is replicated on every GPU")
        self.placement = Placement(rank=0, world_size=replicas)

    def _serve(self) -> None:
        """A worker or ps task: serve the cluster until the process is ended."""
        import tensorflow as tf

        server = tf.distribute.Server(
            tf.train.ClusterSpec(self.cluster), job_name=self.role, task_index=self.task_index,
            protocol="grpc", start=True,
        )
        _notice(f"{self.role}:{self.task_index} serving at {self.cluster[self.role][self.task_index]}")
        server.join()
        sys.exit(0)  # pragma: no cover - join returns only when TensorFlow stops the server

    def _setup_chief(self) -> None:
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=self._partitioner())
        # Validation runs on the chief by design; without this (private) flag every eval call
        # warns that it was not scheduled on a worker.
        self.strategy.extended._allow_run_without_coordinator = True
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)

    def _partitioner(self) -> Any:
        config = self.settings.get("variable_partitioner")
        if config is None:
            return None
        import tensorflow as tf

        return tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=int(config.get("min_shard_bytes", 256 << 10)),
            max_shards=int(config.get("max_shards") or len(self.cluster["ps"])),
        )

    # ----------------------------------------------------------------- loop interface
    @property
    def num_workers(self) -> int:
        return len(self.cluster.get("worker", []))

    @property
    def num_shards(self) -> Any:
        return self._sharding[0]

    @property
    def shard_index(self) -> Any:
        return self._sharding[1]

    @property
    def drives_cluster(self) -> bool:
        return self.strategy is not None

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.strategy.scope() if self.drives_cluster else contextlib.nullcontext()

    def replicas_in_step(self) -> int:
        """Central storage splits a step's batch over its replicas; in an asynchronous cluster
        every update is one worker's batch."""
        return self.placement.world_size if self.mode == "central_storage" else 1

    def asynchronous_workers(self) -> int:
        """A cluster's workers each apply their own batch to the variables on the ps tasks, as soon
        as it is computed (the `asynchronous` capability); central storage waits for its replicas."""
        return self.num_workers if self.mode == "cluster" else 1

    def make_iterator(self, dataset_fn: Callable[[], Any]) -> Any:
        if not self.drives_cluster:
            return super().make_iterator(dataset_fn)
        from backends._ps_steps import DeferredData

        return DeferredData(dataset_fn)

    def make_train_call(self, runner: StepParts) -> StepCall:
        if not self.drives_cluster:
            return super().make_train_call(runner)
        from backends._ps_steps import CentralStorageTrainCall, ClusterTrainCall

        if self.mode == "central_storage":
            return CentralStorageTrainCall(runner, self.strategy, runner.traces)
        self._report_placement(runner)
        return _ExplainedFailures(ClusterTrainCall(runner, self, runner.traces), runner)

    def make_reconcile_call(self, runner: StepParts) -> ReconcileCall | None:
        """The cluster's variables live on the parameter servers (or central storage): one copy, nothing to average."""
        return super().make_reconcile_call(runner) if not self.drives_cluster else None

    def make_val_call(self, runner: StepParts) -> StepCall:
        call = super().make_val_call(runner)
        if not self.drives_cluster:
            return call
        from backends._ps_steps import local_val_call

        return local_val_call(call)

    def per_worker_dataset_fn(self, dataset_fn: Callable[[], Any]) -> Callable[[], Any]:
        """The function each worker runs to build its data: its own shard, repeated."""
        import tensorflow as tf

        def build() -> Any:
            index = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)
            with self._sharded(self.num_workers, index):
                return dataset_fn().repeat()

        return build

    def trains(self) -> bool:
        return self.role != "evaluator"

    def run_task(self, runner: Evaluator) -> int | None:
        """The evaluator task evaluates the chief's checkpoints instead of training."""
        if self.role != "evaluator":
            return None
        return runner.watch()

    def describe(self) -> str:
        if self.mode == "central_storage":
            return f"ps central_storage ({self.placement.world_size} replica(s))"
        return f"ps cluster ({self.num_workers} workers, {len(self.cluster.get('ps', []))} ps; this task {self.role})"

    # ------------------------------------------------------------------------ internals
    @contextlib.contextmanager
    def _sharded(self, num_shards: Any, shard_index: Any) -> Iterator[None]:
        previous, self._sharding = self._sharding, (num_shards, shard_index)
        try:
            yield
        finally:
            self._sharding = previous

    def _report_placement(self, runner: StepParts) -> None:
        """Say where the model's variables live (a test reads this line)."""
        devices: dict[str, int] = {}
        for variable in runner.model.variables:
            for part in getattr(variable, "variables", None) or [variable]:
                devices[part.device] = devices.get(part.device, 0) + 1
        where = ", ".join(f"{count} on {device}" for device, count in sorted(devices.items()))
        _notice(f"{self.describe()}: model variables {where}")


class _ExplainedFailures:
    """The cluster train call, with a lost ps task reported as one clear line."""

    def __init__(self, call: Any, runner: StepParts) -> None:
        self._call = call
        self._runner = runner

    def __call__(self, data: Any, num_steps: Any) -> dict[str, Any]:
        import tensorflow as tf

        try:
            outputs: dict[str, Any] = self._call(data, num_steps)
            return outputs
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as exc:
            message = (exc.message or str(exc)).strip().splitlines()[0]
            raise DslError(
                f"the parameter-server cluster failed at step {self._runner.step} ({message}): a ps task "
                f"or the chief's connection is lost; restart the whole cluster with the same command to "
                f"resume from the last checkpoint in {self._runner.model_dir / 'checkpoints'}"
            ) from None

    def get_concrete_function(self, *args: Any) -> Any:
        return self._call.get_concrete_function(*args)


def _notice(message: str) -> None:
    print(f"dslrun: {message}", file=sys.stderr, flush=True)
