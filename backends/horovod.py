"""Horovod allreduce: the same loop, synchronously data-parallel across ranks and hosts.

Started by `horovodrun -np N dslrun FILE` (Gloo or MPI) or `mpirun -np N dslrun FILE`
(MPI through mpi4py). Each rank trains on its own shard of the data, gradients are
averaged by `DistributedGradientTape`, every rank starts from rank 0's variables, and
only rank 0 writes files. Horovod's knobs come from `runner.horovod` and are set as the
environment variables Horovod reads at `hvd.init()`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from backends.base import Backend
from dsl.distributed.busy_host import say_busy_host
from dsl.distributed.sync_batch_norm import BatchNormSync
from dsl.engine.contracts import ElasticRunner
from dsl.language.context import Placement
from dsl.language.errors import DslError

# runner.horovod key -> (Horovod environment variable, conversion)
_KNOBS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "fusion_threshold_mb": ("HOROVOD_FUSION_THRESHOLD", lambda mb: str(int(mb * 1024 * 1024))),
    "cycle_time_ms": ("HOROVOD_CYCLE_TIME", lambda ms: str(ms)),
    "timeline": ("HOROVOD_TIMELINE", str),
    "autotune": ("HOROVOD_AUTOTUNE", lambda on: "1" if on else "0"),
    "stall_check_seconds": ("HOROVOD_STALL_CHECK_TIME_SECONDS", lambda s: str(int(s))),
    "stall_shutdown_seconds": ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", lambda s: str(int(s))),
}


# Horovod's background thread coordinates the ranks once per cycle (1 ms by default), and
# each cycle is a Gloo exchange: on a small CPU host the Gloo and coordination threads take a
# large share of the CPU away from training. CPU_CYCLE_TIME_MS trains faster; a much longer cycle is
# slower again (gradients wait for the next cycle). The figures are in docs/benchmarks.md.
CPU_CYCLE_TIME_MS = 5


def _has_gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _elastic_settings(runner_params: dict[str, Any]) -> dict[str, Any] | None:
    """runner.elastic (its defaults when null) under an elastic horovodrun; None otherwise."""
    if os.environ.get("HOROVOD_ELASTIC") != "1":
        return None
    from dsl.language.backend_registry import lookup

    defaults = lookup(HorovodBackend.name).defaults("elastic")
    return {**defaults, **(runner_params.get("elastic") or {})}


def _started_by_plain_mpirun() -> bool:
    """mpirun without horovodrun: Horovod must be handed MPI.COMM_WORLD through mpi4py."""
    return "OMPI_COMM_WORLD_SIZE" in os.environ and "HOROVOD_RANK" not in os.environ and "PMI_SIZE" not in os.environ


class HorovodBackend(Backend):
    """Allreduce data parallelism with Horovod (TensorFlow 2 API)."""

    name = "horovod"
    averages_in_step = True

    def __init__(self, runner_params: dict[str, Any] | None = None) -> None:
        super().__init__(runner_params)
        self.settings: dict[str, Any] = dict(self.runner_params.get("horovod") or {})
        self.hvd: Any = None
        # runner.elastic's settings when horovodrun started an elastic job, else None.
        self.elastic: dict[str, Any] | None = None

    def setup(self) -> None:
        for key, (variable, convert) in _KNOBS.items():
            if self.settings.get(key) is not None:
                os.environ[variable] = convert(self.settings[key])
        if self.settings.get("cycle_time_ms") is None and "HOROVOD_CYCLE_TIME" not in os.environ and not _has_gpu():
            os.environ["HOROVOD_CYCLE_TIME"] = str(CPU_CYCLE_TIME_MS)
        try:
            import horovod.tensorflow as hvd
        except ImportError as exc:
            raise DslError(
                f"runner.backend is horovod but Horovod cannot be imported ({exc}); install it with "
                "`make install` (builds horovod==0.28.1 against the venv's TensorFlow), or run without "
                "horovodrun/mpirun and set runner.backend: local"
            ) from None
        if _started_by_plain_mpirun():
            from mpi4py import MPI

            hvd.init(comm=MPI.COMM_WORLD)
        else:
            hvd.init()
        self.hvd = hvd
        self.placement = Placement(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank())
        self.elastic = _elastic_settings(self.runner_params)
        self._configure_devices()

    def refresh_placement(self) -> None:
        """Read rank and size again after an elastic reset; the one Placement object is shared
        with the runner and the build context, so everyone sees the new values."""
        self.placement.rank = self.hvd.rank()
        self.placement.world_size = self.hvd.size()
        self.placement.local_rank = self.hvd.local_rank()

    def run_training(self, runner: ElasticRunner, train: Callable[[], None]) -> None:
        if self.elastic is None:
            if self.runner_params.get("elastic") is not None:
                runner.notice("runner.elastic is set, but horovodrun was started without --host-discovery-script: "
                              "the ranks are fixed (a lost rank ends the job)")
            train()
            return
        from backends._elastic import run_elastic

        run_elastic(self, runner, train)

    def _configure_devices(self) -> None:
        """One GPU per local rank; on CPUs, split the cores between the ranks of this host."""
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            gpu = gpus[self.hvd.local_rank() % len(gpus)]
            tf.config.experimental.set_memory_growth(gpu, True)
            tf.config.set_visible_devices(gpu, "GPU")
            return
        if self.hvd.rank() == 0:
            say_busy_host(self.hvd.local_size())
        if not self.runner_params.get("intra_op_threads"):
            # N ranks each using every core fight over them; one share each is faster.
            share = max(1, (os.cpu_count() or 1) // max(1, self.hvd.local_size()))
            tf.config.threading.set_intra_op_parallelism_threads(share)
            if not self.runner_params.get("inter_op_threads"):
                tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, share)))

    def replicas_in_step(self) -> int:
        return self.placement.world_size

    def wrap_tape(self, tape: Any) -> Any:
        import tensorflow as tf

        hvd = self.hvd
        compression = hvd.Compression.fp16 if self.settings.get("compression") == "fp16" else hvd.Compression.none
        op = {"average": hvd.Average, "sum": hvd.Sum, "adasum": hvd.Adasum}[self.settings.get("op", "average")]
        distributed = hvd.DistributedGradientTape(
            tape,
            compression=compression,
            op=op,
            gradient_predivide_factor=float(self.settings.get("gradient_predivide_factor", 1.0)),
            num_groups=int(self.settings.get("num_groups", 0)),
        )
        # Horovod's gradient and allreduce are graph code as written (they run in TensorFlow 1 graphs
        # too). Called from the train step, AutoGraph converted them anyway, as it does every module
        # outside TensorFlow's own, which made it the largest part of each rank's start.
        distributed.gradient = tf.autograph.experimental.do_not_convert(distributed.gradient)
        return distributed

    def broadcast(self, variables: list[Any]) -> None:
        if self.elastic is not None:
            # An elastic job must not communicate before hvd.elastic.run: a rank joining later
            # would meet the others inside their state sync. That sync broadcasts rank 0's
            # variables to every rank, restored ones included.
            return
        self.hvd.broadcast_variables(variables, root_rank=0)

    def prepare_model(self, model: Any, batch_norm: BatchNormSync) -> Any:
        """Synchronised batch norm when `batch_norm.on`. An elastic run with the switch at `auto`
        gets switchable layers whatever the size it starts at, so a resize can turn the
        synchronisation on or off (the train call is traced again after every resize) instead of
        rebuilding the network mid-run; off, they normalise as plain non-fused layers."""
        switchable = batch_norm.auto and self.elastic is not None
        if not batch_norm.on and not switchable:
            return model
        from backends._sync_batch_norm import convert_batch_norm, horovod_switchable, set_synchronised

        converted = convert_batch_norm(model, horovod_switchable())
        set_synchronised(converted, batch_norm.on)
        return converted

    def average_across_replicas(self, tensors: list[Any]) -> list[Any]:
        import tensorflow as tf

        allreduce = tf.autograph.experimental.do_not_convert(self.hvd.grouped_allreduce)  # graph code: see wrap_tape
        return list(allreduce(tensors, op=self.hvd.Average, name="dslrun_replica_state"))

    def sum_across_ranks(self, arrays: list[Any]) -> list[Any]:
        import tensorflow as tf

        if not arrays:
            return []
        tensors = [tf.constant(array, tf.float64) for array in arrays]
        summed = self.hvd.grouped_allreduce(tensors, op=self.hvd.Sum, name="dslrun_metric_state")
        return [tensor.numpy() for tensor in summed]

    def gather_objects(self, value: Any) -> list[Any]:
        return list(self.hvd.allgather_object(value, name="dslrun_gather_objects"))

    def max_across_ranks(self, value: int) -> int:
        import tensorflow as tf

        return int(self.hvd.allreduce(tf.constant(value, tf.int32), op=self.hvd.Max, name="dslrun_stop").numpy())

    def gather_strings(self, value: str) -> list[str]:
        return list(self.hvd.allgather_object(value, name="dslrun_gather"))

    def shutdown(self) -> None:
        if self.hvd is not None and self.hvd.is_initialized():
            self.hvd.shutdown()

    def describe(self) -> str:
        return f"horovod ({self.placement.world_size} ranks, rank {self.placement.rank})"
