"""What dslrun's compiled train call adds to a task's step, call by call in one process.

    python bench/call_overhead.py --task text|detection|segmentation --data DIR [--pairs 150] [--batch 64]

For P6 (bench/tasks.py): the shipped pipeline's train call as the runner makes it, the same
optimizer step (dsl.engine.steps.make_step) compiled alone around the iterator's `next`, and the
hand-written `tf.function` loop's step, alternated pair by pair (bench/profile.py's `alternate`)
so that load from other processes hits both sides alike. A short step (text: about 3 ms) shows
what the call costs around the step: the graph loop of `runner.steps_per_call`, the metrics'
results and the learning rate it returns. Prints one JSON line: the paired CPU and wall ratios
and the graph op counts of the three.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from profile import alternate, op_types  # noqa: E402

import tasks  # noqa: E402  (bench/ is put on the path above)
from cases import load_average  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=sorted(tasks.PIPELINES))
    parser.add_argument("--data", required=True, help="the task's data, as `dslrun data synthetic-...` writes it")
    parser.add_argument("--pairs", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    import tensorflow as tf

    from dsl.commands._training import build_runner
    from dsl.engine.steps import make_step

    case = argparse.Namespace(task=args.task, data=args.data, batch=args.batch, warmup=5, steps=30)
    with tempfile.TemporaryDirectory() as run:
        runner = build_runner(tasks.pipeline(case, run), resume=False)
        runner.restore()
        iterator, one = runner.data.train_iterator(0, 0, runner.steps_per_epoch), tf.constant(1, tf.int32)
        step = make_step(runner.model, runner.modeler, runner.optimizer, runner.metrics["train"])
        step_alone = tf.function(lambda: step(*next(iterator)))
        model, data, optimizer, context = tasks.reference_parts(case, run)
        loss_fn, metrics = tasks.keras_loss_and_metrics(args.task, context)

        loop = tasks.loop_step(model, loss_fn, metrics, optimizer)
        batches = iter(data)

        def dslrun_call() -> None:
            {name: float(value) for name, value in runner._train_call(iterator, one).items()}

        def loop_call() -> None:
            float(loop(*next(batches)))

        timing = {"dslrun_vs_step_alone": alternate({"dslrun": dslrun_call, "step_alone": lambda: float(step_alone())},
                                                    args.pairs),
                  "dslrun_vs_loop": alternate({"dslrun": dslrun_call, "loop": loop_call}, args.pairs)}
        features, targets = next(iter(data))
        graphs = {"dslrun": runner._train_call.get_concrete_function(iterator, one),
                  "step_alone": step_alone.get_concrete_function(),
                  "loop": loop.get_concrete_function(features, targets)}
        ops = {name: sum(op_types(function.graph.as_graph_def()).values()) for name, function in graphs.items()}
    print(json.dumps({"case": "call_overhead", "task": args.task, "batch": args.batch, "graph_ops": ops, **timing,
                      "loadavg": load_average()}), flush=True)


if __name__ == "__main__":
    main()
