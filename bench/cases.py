"""One benchmark case in one process: train a ResNet-CIFAR for warm-up + timed steps.

    python bench/cases.py --case dslrun|fit|loop|hvd_loop [--input synthetic|csv] ...

Prints one JSON line (rank 0 only under horovodrun): images/s over the timed steps (all
ranks together), seconds from `--launched-at` to the first finished step, and this
process's peak resident memory. The references are what a user would write by hand,
on the same network (built by dslrun's own `resnet_cifar` builder, so only the training
machinery differs), the same data and the same thread settings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["dslrun", "fit", "loop", "hvd_loop", "replica_state"])
    parser.add_argument("--input", default="synthetic", choices=["synthetic", "csv"])
    parser.add_argument("--data", default="", help="CSV+PNG directory for --input csv")
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TensorFlow decides)")
    parser.add_argument("--inter", type=int, default=0, help="inter-op threads (0: dslrun's default)")
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"],
                        help="runner.precision of the dslrun case")
    parser.add_argument("--sync-bn", action="store_true", help="runner.horovod.sync_batch_norm of the dslrun case")
    parser.add_argument("--compression", default="none", choices=["none", "fp16"],
                        help="runner.horovod.compression of the dslrun case")
    parser.add_argument("--fusion-threshold-mb", type=float, default=None,
                        help="runner.horovod.fusion_threshold_mb of the dslrun case (default: Horovod's 64)")
    parser.add_argument("--backend", default="auto", choices=["auto", "collective"],
                        help="runner.backend of the dslrun case (collective: one process per TF_CONFIG task)")
    parser.add_argument("--no-reconcile", action="store_true",
                        help="dslrun case without any averaging of batch-norm statistics (to measure it)")
    parser.add_argument("--reconcile-every-call", action="store_true",
                        help="dslrun case averaging batch-norm statistics after every call (the rule before "
                             "they were averaged where read, dsl/engine/replicas.py), to measure what that saves")
    parser.add_argument("--agree-every-call", action="store_true",
                        help="dslrun case with the ranks agreeing on stopping after every call (the rule before "
                             "dsl/engine/stop_agreement.py), to measure what agreeing every 16 steps saves")
    parser.add_argument("--calls-of", type=int, default=1, help="replica_state case: steps per timed call")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in this process before TensorFlow starts (e.g. TF_ENABLE_ONEDNN_OPTS=0)")
    parser.add_argument("--launched-at", type=float, default=0.0)
    args = parser.parse_args()
    os.environ.update(setting.split("=", 1) for setting in args.env)
    return args


def thread_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of this process, by thread id.

    Read from /proc/self/task/*/stat ({} where /proc is missing). TensorFlow's pools do not
    name their threads (all are "python"), so threads are told apart by how much they use.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    threads: dict[int, float] = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        threads[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return threads


def cpu_by_thread(before: dict[int, float], after: dict[int, float], top: int = 4) -> dict[str, float]:
    """CPU seconds each thread spent between two `thread_cpu_seconds()` readings.

    The Python thread as "main", the `top` busiest other threads as "1", "2", ... (for
    TensorFlow's two intra-op threads on this host, these are the compute), the rest
    summed as "other" — enough to see where a step's CPU time goes besides the compute.
    """
    spent = {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}
    figures = {"main": round(spent.pop(os.getpid(), 0.0), 3)}
    ranked = sorted(spent.values(), reverse=True)
    figures.update({str(place): round(seconds, 3) for place, seconds in enumerate(ranked[:top], start=1)})
    figures["other"] = round(sum(ranked[top:]), 3)
    return figures


class Clock:
    """Marks the first step, the end of warm-up and the end of the timed steps.

    Besides wall time it reads the CPU time of the whole process (every thread) at the two
    marks: on this shared VM wall-clock throughput swings with the neighbours' load, CPU
    seconds per step barely do, so the two together separate cost from noise.
    """

    def __init__(self, warmup: int, launched_at: float, steps: int = 0) -> None:
        self.warmup, self.launched_at, self.last = warmup, launched_at, warmup + steps
        self.first = self.start = self.end = 0.0
        self.cpu_start = self.cpu_end = 0.0
        self.threads_start: dict[int, float] = {}
        self.threads_end: dict[int, float] = {}
        self.call_seconds = 0.0
        self.calls_timed = False

    def step_done(self, step: int, call_seconds: float | None = None) -> None:
        """Step `step` finished; `call_seconds` is how long its compiled call took (None when
        the case cannot tell, as inside `fit`)."""
        now, cpu = time.time(), time.process_time()
        if call_seconds is not None and self.warmup < step <= self.last:
            self.call_seconds += call_seconds
            self.calls_timed = True
        if step == 1 or (not self.first and step >= 1):
            self.first = now
        if step == self.warmup:
            self.start, self.cpu_start = now, cpu
            self.threads_start = thread_cpu_seconds()
        self.end, self.cpu_end = now, cpu
        if step == self.last:
            self.threads_end = thread_cpu_seconds()

    def dslrun_callback(self) -> Any:
        """A dslrun callback that tells this clock of every train step, before any other hook runs."""
        from dsl.engine.hooks import Callback

        clock = self

        class Timer(Callback):
            priority = "HIGHEST"

            def after_train_iter(self, runner: Any) -> None:
                clock.step_done(runner.step, runner.iter_seconds)

        return Timer()

    def keras_callback(self) -> Any:
        """A Keras callback that tells this clock of every batch `fit` trains."""
        import tensorflow as tf

        clock = self

        class Timer(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                clock.step_done(batch + 1)

        return Timer()

    def cpu_figures(self, steps: int) -> dict[str, Any]:
        """CPU seconds per timed step (all threads), the share of the window the process kept
        its cores busy, the wall time per step spent outside the compiled call (Python, hooks,
        logging: the cores idle meanwhile), and the window's CPU seconds per thread."""
        cpu, wall = self.cpu_end - self.cpu_start, self.end - self.start
        between = (wall - self.call_seconds) / steps if self.calls_timed else None
        return {"cpu_seconds_per_step": cpu / steps, "cpu_per_wall": cpu / max(wall, 1e-9),
                "between_calls_ms_per_step": None if between is None else 1000 * between,
                "cpu_seconds_by_thread": cpu_by_thread(self.threads_start, self.threads_end)}


def report(args: argparse.Namespace, clock: Clock, world: int, rank: int, extra: dict | None = None) -> None:
    if rank != 0:
        return
    seconds = clock.end - clock.start
    print(json.dumps({
        "case": args.case, "input": args.input, "world_size": world, "threads": args.threads,
        "precision": args.precision, "batch_per_rank": args.batch,
        "images_per_second": args.steps * args.batch * world / seconds,
        **clock.cpu_figures(args.steps),
        "startup_seconds": clock.first - args.launched_at if args.launched_at else None,
        "peak_rss_mb": peak_rss_mb(), "timed_window": [clock.start, clock.end],
        "loadavg": load_average(), **(extra or {}),
    }), flush=True)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what else this shared host was running)."""
    try:
        return [float(value) for value in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


# ------------------------------------------------------------------------------ dslrun
# One train phase for the whole run, as the shipped pipelines have (an epoch, or 200 iters in
# cnn_iters.yaml): `workflow: [[train, 1]]` with `max_iters` makes every step a phase of its
# own, with its metrics reset, read and written to metrics.jsonl — 2.7 ms per step between
# calls against 0.1 ms (docs/benchmarks.md, P1), a record per step that no user asks for.
PIPELINE = """\
version: 1
name: bench
seed: 1
inputter: {inputter}
augmenter: {{type: {augmenter}}}
network: {{type: resnet_cifar, depth: {depth}}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.1, momentum: 0.9}}
runner:
  model_dir: {run}
  backend: {backend}
  workflow: [[train, {iters}]]
  max_iters: {iters}
  intra_op_threads: {threads}
  inter_op_threads: {inter}
  batch_scaling: linear  # --batch is per process, as in the hand-written Horovod loop
  lr_scaling: none
  precision: {precision}
  horovod: {{sync_batch_norm: {sync_bn}, compression: {compression}, fusion_threshold_mb: {fusion}}}
"""


def run_dslrun(args: argparse.Namespace) -> None:
    from dsl.language.pipeline import load_resolved

    if args.input == "csv":
        inputter = (f"{{type: image_classification_csv, train: {args.data}/train.csv, num_classes: 10, "
                    f"batch_size: {args.batch}, shuffle_buffer: 10000}}")
        augmenter = "cifar"
    else:
        inputter = (f"{{type: synthetic, num_examples: {{train: 50000, val: 0, test: 0}}, "
                    f"num_classes: 10, batch_size: {args.batch}}}")
        augmenter = "none"
    clock = Clock(args.warmup, args.launched_at, args.steps)

    with tempfile.TemporaryDirectory() as run:
        path = Path(run) / "bench.yaml"
        path.write_text(PIPELINE.format(inputter=inputter, augmenter=augmenter, depth=args.depth, run=run,
                                        iters=args.warmup + args.steps, threads=args.threads or "null",
                                        inter=args.inter or "null", precision=args.precision,
                                        sync_bn="true" if args.sync_bn else "false", backend=args.backend,
                                        compression=args.compression,
                                        fusion="null" if args.fusion_threshold_mb is None else args.fusion_threshold_mb))
        from dsl.commands._training import build_runner

        if args.no_reconcile:
            # The measuring instrument only: nothing to average, so no allreduce is issued.
            import dsl.engine.replicas

            dsl.engine.replicas.replica_local_variables = lambda model: []

        if args.reconcile_every_call:  # the measuring instrument only
            from dsl.engine.callback_list import CallbackList

            CallbackList.read_replica_state = lambda *_: True  # type: ignore[method-assign]

        if args.agree_every_call:  # the measuring instrument only
            import dsl.engine.stop_agreement

            dsl.engine.stop_agreement.due = lambda *_: True  # type: ignore[assignment]

        runner = build_runner(load_resolved(path), resume=False)
        runner.add_callback(clock.dslrun_callback())
        runner.run()
        report(args, clock, runner.placement.world_size, runner.placement.rank,
               {"retraces": dict(runner.traces)})


def run_replica_state(args: argparse.Namespace) -> None:
    """The cost of averaging batch-norm statistics after every call, measured inside one job.

    dslrun's train call followed by its reconcile call (the allreduce of the moving
    statistics, what every call paid before they were averaged where read) against the
    train call alone. They alternate, call by call, so load from other processes of this
    shared host hits both alike; the median per-step times of each and their ratio are
    reported (rank 0).
    """
    import tensorflow as tf

    from dsl.commands._training import build_runner
    from dsl.language.pipeline import load_resolved

    inputter = (f"{{type: synthetic, num_examples: {{train: 50000, val: 0, test: 0}}, "
                f"num_classes: 10, batch_size: {args.batch}}}")
    with tempfile.TemporaryDirectory() as run:
        path = Path(run) / "bench.yaml"
        path.write_text(PIPELINE.format(inputter=inputter, augmenter="none", depth=args.depth, run=run,
                                        iters=1, threads="null", inter="null", precision="float32",
                                        sync_bn="false", backend="auto", compression="none", fusion="null"))
        runner = build_runner(load_resolved(path), resume=False)
        runner.restore()
        plain, reconcile = runner._train_call, runner.replica_state.call
        assert reconcile is not None, "the replica_state case needs 2 ranks"

        def averaging(iterator: Any, steps: Any) -> dict:
            outputs = plain(iterator, steps)
            reconcile()
            return outputs

        iterator = runner.data.train_iterator(0, 0, runner.steps_per_epoch)
        steps = tf.constant(args.calls_of, tf.int32)
        times: dict[str, list[float]] = {"averaging": [], "plain": []}
        calls = {"averaging": averaging, "plain": plain}
        for index in range(args.warmup + args.steps):
            order = ["averaging", "plain"] if index % 2 == 0 else ["plain", "averaging"]
            for name in order:
                start = time.perf_counter()
                float(calls[name](iterator, steps)["loss"])
                if index >= args.warmup:
                    times[name].append((time.perf_counter() - start) / args.calls_of)
        if runner.placement.rank == 0:
            ratios = [a / p for a, p in zip(times["averaging"], times["plain"])]
            print(json.dumps({"case": "replica_state", "world_size": runner.placement.world_size,
                              "step_ms_averaging": 1000 * statistics.median(times["averaging"]),
                              "step_ms_plain": 1000 * statistics.median(times["plain"]),
                              "time_ratio": summary_of(ratios),
                              "averaged_variables": len(runner.model.non_trainable_variables)}), flush=True)


def summary_of(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# -------------------------------------------------------------------------- references
def reference_model(args: argparse.Namespace) -> Any:
    """The same ResNet as dslrun's (built by its builder), so only the machinery differs."""
    from dsl.language.context import BuildContext
    from dsl.language.registry import lookup

    component = lookup("network", "resnet_cifar")
    params = {"type": "resnet_cifar", "depth": args.depth}
    params.update({k: v["default"] for k, v in component.params.items() if k not in params and "default" in v})
    return component.builder(params, BuildContext(pipeline={}, image_shape=(32, 32, 3), num_classes=10))


def reference_data(args: argparse.Namespace, shard: tuple[int, int] = (1, 0)) -> Any:
    """What a user would write: random images in memory, tf.data, shuffled, batched, prefetched."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    images = rng.random((1024, 32, 32, 3), dtype=np.float32)
    labels = rng.integers(0, 10, 1024).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).shard(*shard)
    return data.repeat().shuffle(1024).batch(args.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def run_fit(args: argparse.Namespace) -> None:
    import tensorflow as tf

    model = reference_model(args)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    clock = Clock(args.warmup, args.launched_at, args.steps)
    model.fit(reference_data(args), steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0,
              callbacks=[clock.keras_callback()])
    report(args, clock, 1, 0)


def make_loop_step(model: Any, hvd: Any = None) -> Any:
    """The hand-written step: `train_step(images, labels, first)` -> loss, a tf.function.

    Momentum SGD, sparse cross-entropy from logits and a running accuracy, as dslrun's
    `image_classification` modeler does by default (its L2 term is 0 unless weight_decay is
    set), so the two do the same work per step; with `hvd`, Horovod's tensorflow2 example.
    """
    import tensorflow as tf

    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accuracy = tf.keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def train_step(images: tf.Tensor, labels: tf.Tensor, first: bool) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = loss_fn(labels, logits)
        if hvd:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        if hvd and first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
        accuracy.update_state(labels, logits)
        return loss

    return train_step


def run_loop(args: argparse.Namespace, hvd: Any = None) -> None:
    """A careful hand-written tf.function loop; with `hvd`, Horovod's tensorflow2 example style."""
    world, rank = (hvd.size(), hvd.rank()) if hvd else (1, 0)
    train_step = make_loop_step(reference_model(args), hvd)
    clock = Clock(args.warmup, args.launched_at, args.steps)
    for step, (images, labels) in enumerate(reference_data(args, (world, rank)).take(args.warmup + args.steps)):
        tick = time.perf_counter()
        loss = train_step(images, labels, step == 0)
        float(loss)  # a user prints or logs the loss; it also makes the timing honest
        clock.step_done(step + 1, time.perf_counter() - tick)
    report(args, clock, world, rank)


def main() -> None:
    args = parse()
    import tensorflow as tf

    if args.case != "dslrun" and args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    if args.case == "dslrun":
        run_dslrun(args)
    elif args.case == "replica_state":
        run_replica_state(args)
    elif args.case == "fit":
        run_fit(args)
    elif args.case == "loop":
        run_loop(args)
    else:
        import horovod.tensorflow as hvd

        hvd.init()
        run_loop(args, hvd)


if __name__ == "__main__":
    main()
