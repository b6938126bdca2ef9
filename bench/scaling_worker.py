"""One rank of the gradient-exchange bench: time the allreduce of a set of gradient-shaped tensors.

Started by bench/scaling.py on every test host, under horovodrun (`--backend horovod`, Gloo or
MPI) or as a MultiWorkerMirroredStrategy worker (`--backend collective`, TF_CONFIG set). The
tensors have the shapes of a network's trainable variables (`--shapes`, written by
bench/scaling_shapes.py), so the exchange sees the real tensor count and sizes.

The run goes in phases, one per link setting: before each the rank waits for the file
`go-<phase>` in `--sync-dir`, which the driver writes once it has shaped the links; after it,
rank 0 writes `done-<phase>`. In a phase, for every tensor set and for float32 and float16
(Horovod's fp16 compression; for collective a cast before the all-reduce), it runs the
warm-up exchanges, then the timed ones, each after a barrier (a one-number allreduce), and
appends every iteration's seconds to `rank<r>.jsonl`; the driver takes, per iteration, the
slowest rank, then the median.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

# Per set: (warm-up, timed) exchanges. The 100 MB set takes seconds a time on a 1 Gbit/s link.
ITERATIONS = {"small": (3, 15), "large": (1, 4)}
LARGE_BYTES = 20e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["horovod", "collective"], required=True)
    parser.add_argument("--shapes", required=True, help="JSON from bench/scaling_shapes.py: {\"sets\": {name: [[dim, ...], ...]}}")
    parser.add_argument("--sets", required=True, help="comma-separated set names of --shapes")
    parser.add_argument("--phases", type=int, required=True)
    parser.add_argument("--sync-dir", required=True)
    parser.add_argument("--fusion", choices=["on", "off", "both"], default="on",
                        help="horovod: on or off (HOROVOD_FUSION_THRESHOLD=0); collective: both")
    args = parser.parse_args()
    if args.backend == "horovod" and args.fusion == "off":
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"  # read by hvd.init()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # up to 8 ranks share 2 cores
    tf.config.threading.set_inter_op_parallelism_threads(2)
    shapes = json.loads(Path(args.shapes).read_text())["sets"]
    exchanger = HorovodExchange(args.fusion) if args.backend == "horovod" else CollectiveExchange()
    sets = {name: exchanger.variables([tuple(shape) for shape in shapes[name]]) for name in args.sets.split(",")}
    sync = Path(args.sync_dir)
    out = sync / f"rank{exchanger.rank}.jsonl"
    for phase in range(args.phases):
        _wait_for(sync / f"go-{phase}")
        exchanger.barrier()
        for name, variables in sets.items():
            size = sum(int(v.shape.num_elements()) * 4 for v in variables)
            warmup, timed = ITERATIONS["large" if size > LARGE_BYTES else "small"]
            for fp16 in (False, True):
                for fusion in exchanger.fusion_settings:
                    exchange = exchanger.function(variables, fp16, fusion)
                    times = _time(exchange, exchanger.barrier, warmup, timed)
                    with open(out, "a") as handle:
                        handle.write(json.dumps({"phase": phase, "set": name, "fp16": fp16, "fusion": fusion,
                                                 "tensors": len(variables), "bytes": size,
                                                 "rank": exchanger.rank, "size": exchanger.size,
                                                 "seconds": times}) + "\n")
        exchanger.barrier()
        if exchanger.rank == 0:
            (sync / f"done-{phase}").write_text("")


def _wait_for(path: Path, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s: is bench/scaling.py still running?")
        time.sleep(0.05)


def _time(exchange: Callable[[], Any], barrier: Callable[[], None], warmup: int, timed: int) -> list[float]:
    """Seconds of each timed exchange, every one started right after a barrier."""
    for _ in range(warmup):
        barrier()
        exchange()
    times = []
    for _ in range(timed):
        barrier()
        started = time.perf_counter()
        exchange()
        times.append(time.perf_counter() - started)
    return times


class HorovodExchange:
    """hvd.allreduce of every tensor in one tf.function, as DistributedGradientTape submits them."""

    def __init__(self, fusion: str) -> None:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()
        self.hvd, self.tf = hvd, tf
        self.rank, self.size = hvd.rank(), hvd.size()
        self.fusion_settings = [fusion]
        self._one = tf.constant(1.0)

    def variables(self, shapes: list[tuple[int, ...]]) -> list[Any]:
        return [self.tf.Variable(self.tf.random.normal(shape, seed=i)) for i, shape in enumerate(shapes)]

    def barrier(self) -> None:
        self.hvd.allreduce(self._one, op=self.hvd.Sum, name="bench_barrier").numpy()

    def function(self, variables: list[Any], fp16: bool, fusion: str) -> Callable[[], Any]:
        hvd = self.hvd
        compression = hvd.Compression.fp16 if fp16 else hvd.Compression.none

        @self.tf.function
        def exchange() -> Any:
            return [hvd.allreduce(v, op=hvd.Sum, compression=compression, name=f"g{i}") for i, v in enumerate(variables)]

        return exchange


class CollectiveExchange:
    """One all_reduce of the list in the replica context, TF's RING; fusion is bytes_per_pack."""

    PACK: ClassVar[dict[str, int]] = {"on": 0, "off": 1}  # 0: one pack of every tensor (TF's default); 1: a pack per tensor

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        communication = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication)
        resolver = self.strategy.cluster_resolver
        self.rank, self.size = resolver.task_id, self.strategy.num_replicas_in_sync
        self.fusion_settings = ["on", "off"]
        with self.strategy.scope():
            one = tf.Variable(1.0)

        @tf.function
        def barrier() -> Any:
            return self.strategy.run(
                lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, one.read_value()))

        self._barrier = barrier

    def variables(self, shapes: list[tuple[int, ...]]) -> list[Any]:
        with self.strategy.scope():
            return [self.tf.Variable(self.tf.random.normal(shape, seed=i)) for i, shape in enumerate(shapes)]

    def barrier(self) -> None:
        self.strategy.experimental_local_results(self._barrier())[0].numpy()

    def function(self, variables: list[Any], fp16: bool, fusion: str) -> Callable[[], Any]:
        tf = self.tf
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=self.PACK[fusion], implementation=tf.distribute.experimental.CommunicationImplementation.RING)

        def replica_step() -> Any:
            values = [v.read_value() for v in variables]
            if fp16:
                values = [tf.cast(v, tf.float16) for v in values]
            reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values, options=options)
            return [tf.cast(r, tf.float32) for r in reduced] if fp16 else reduced

        @tf.function
        def exchange() -> Any:
            return self.strategy.run(replica_step)

        def run() -> Any:
            results = exchange()
            return self.strategy.experimental_local_results(results[0])[0].numpy().shape

        return run


if __name__ == "__main__":
    main()
