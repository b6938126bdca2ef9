"""What dslrun's train step runs that the hand-written loop's does not, measured in one process.

    python bench/profile.py [--pairs 20] [--batches 200]

Prints one JSON line with three pieces of evidence for docs/benchmarks.md (P1):

- **graph ops**: the op types of dslrun's compiled train call (its `tf.range` loop body
  included) against the `loop` case's `train_step`, and the types whose counts differ;
- **the compiled calls side by side**: dslrun's train call (one step, its own `tf.data`
  iterator) and the loop's step (its own iterator, `next` in Python as the loop case does)
  alternate call by call in this process, on two copies of the same network, so load from
  other processes of this shared host hits both alike; median CPU seconds (every thread)
  and wall seconds per step, and the medians of the paired ratios;
- **the input pipelines alone**: CPU milliseconds per batch of each case's `tf.data`
  pipeline, iterated without training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import PIPELINE, load_average, make_loop_step, reference_data, reference_model


def op_types(graph_def: Any) -> Counter[str]:
    """Op types of a GraphDef, the bodies of its functions (a while loop's) included."""
    counts = Counter(node.op for node in graph_def.node)
    for function in graph_def.library.function:
        counts.update(node.op for node in function.node_def)
    return counts


def dslrun_runner(run_dir: str, batch: int, depth: int) -> Any:
    """The `dslrun` bench case's runner (synthetic inputter, no augmentation), restored to step 0."""
    from dsl.commands._training import build_runner
    from dsl.language.pipeline import load_resolved

    inputter = (f"{{type: synthetic, num_examples: {{train: 50000, val: 0, test: 0}}, "
                f"num_classes: 10, batch_size: {batch}}}")
    path = Path(run_dir) / "bench.yaml"
    path.write_text(PIPELINE.format(inputter=inputter, augmenter="none", depth=depth, run=run_dir, iters=1,
                                    threads="null", inter="null", precision="float32", sync_bn="false",
                                    backend="auto", compression="none", fusion="null"))
    runner = build_runner(load_resolved(path), resume=False)
    runner.restore()
    return runner


def alternate(calls: dict[str, Callable[[], None]], pairs: int, warmup: int = 3) -> dict[str, Any]:
    """Each call `pairs` times, alternating (order swapped every round); CPU and wall per call."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    wall: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for index in range(pairs):
        for name in names if index % 2 == 0 else names[::-1]:
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            calls[name]()
            cpu[name].append(time.process_time() - cpu_start)
            wall[name].append(time.perf_counter() - wall_start)
    first, second = names
    return {
        "cpu_seconds_per_step": {name: statistics.median(values) for name, values in cpu.items()},
        "wall_seconds_per_step": {name: statistics.median(values) for name, values in wall.items()},
        f"cpu_ratio_{first}_over_{second}": statistics.median(a / b for a, b in zip(cpu[first], cpu[second])),
        f"wall_ratio_{first}_over_{second}": statistics.median(a / b for a, b in zip(wall[first], wall[second])),
        "pairs": pairs,
    }


def input_cost(datasets: dict[str, Any], batches: int) -> dict[str, float]:
    """CPU milliseconds (every thread) per batch of each dataset, iterated alone."""
    found = {}
    for name, dataset in datasets.items():
        iterator = iter(dataset)
        for _ in range(20):  # fill the prefetch buffer, let autotuning settle
            next(iterator)
        start = time.process_time()
        for _ in range(batches):
            next(iterator)
        found[name] = 1000 * (time.process_time() - start) / batches
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20, help="alternated steps of each side")
    parser.add_argument("--batches", type=int, default=200, help="batches per input-pipeline measurement")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--depth", type=int, default=32)
    args = parser.parse_args()
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as run_dir:
        runner = dslrun_runner(run_dir, args.batch, args.depth)
        dslrun_iterator = runner.data.train_iterator(0, 0, runner.steps_per_epoch)
        one = tf.constant(1, tf.int32)
        train_step = make_loop_step(reference_model(args))
        loop_iterator = iter(reference_data(args))

        def dslrun_call() -> None:
            float(runner._train_call(dslrun_iterator, one)["loss"])

        def loop_call() -> None:
            images, labels = next(loop_iterator)
            float(train_step(images, labels, False))

        timing = alternate({"dslrun": dslrun_call, "loop": loop_call}, args.pairs)
        images, labels = next(iter(reference_data(args)))
        dslrun_ops = op_types(runner._train_call.get_concrete_function(dslrun_iterator, one).graph.as_graph_def())
        loop_ops = op_types(train_step.get_concrete_function(images, labels, False).graph.as_graph_def())
        differing = {op: [dslrun_ops[op], loop_ops[op]] for op in sorted(set(dslrun_ops) | set(loop_ops))
                     if dslrun_ops[op] != loop_ops[op]}
        inputs = input_cost({"dslrun": runner.data.train(1, 0, runner.steps_per_epoch)(), "loop": reference_data(args)}, args.batches)
    print(json.dumps({
        "case": "profile",
        "graph_ops": {"dslrun": sum(dslrun_ops.values()), "loop": sum(loop_ops.values()),
                      "differing_types_dslrun_loop": differing},
        "alternated": timing,
        "input_cpu_ms_per_batch": inputs,
        "loadavg": load_average(),
    }), flush=True)


if __name__ == "__main__":
    main()
