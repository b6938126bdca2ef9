"""`make bench-stacks`: the same quickstart on two stacks, side by side (docs/benchmarks.md, "Stacks").

Each stack is a Python interpreter with dslrun installed (its own venv): by default this
repository's .venv and the interpreter given by --old (e.g. an older checkout's TF 2.15 venv).
For each, interleaved repetition by repetition, it measures:

- `import tensorflow`: wall time of a fresh process that imports it;
- start-up to the first step: from starting `dslrun pipelines/quickstart.yaml` to the end of
  its first training step (the loss line of step 1: pipeline load, TF import, data, model
  build, tracing of the step function);
- throughput: the quickstart's train phase average, images/s, of its second epoch (steady state).

    python bench/stacks.py --old /path/to/old/.venv/bin/python [--new PYTHON] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# No TF_USE_LEGACY_KERAS here: dslrun sets it where tf_keras is the stack's Keras; TF 2.15 (Keras 2
# built in) would look for a tf_keras package it does not have.
ENV = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"TF_CPP_MIN_LOG_LEVEL": "3",
                                                                              "PYTHONUNBUFFERED": "1"}
IMPORT = "import time; t = time.perf_counter(); import tensorflow; print(time.perf_counter() - t)"
STEP = re.compile(r"^train epoch 1/\d+ iter 1/\d+ \(step 1\): loss")
PHASE = re.compile(r"^train epoch 2/2 \(step \d+\): ([\d.]+) images/s")


def versions(python: str) -> str:
    code = ("import os, sys, importlib.util; importlib.util.find_spec('tf_keras') and "
            "os.environ.setdefault('TF_USE_LEGACY_KERAS', '1'); import tensorflow as tf; "
            "from importlib.metadata import version; "
            "print(f'Python {sys.version.split()[0]}, TensorFlow {tf.__version__}, Keras ' + "
            "(version('tf-keras') if tf.keras.__name__.startswith('tf_keras') else version('keras')))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=ENV, check=True).stdout.strip()


def import_seconds(python: str) -> float:
    out = subprocess.run([python, "-c", IMPORT], capture_output=True, text=True, env=ENV, check=True).stdout
    return float(out.strip().splitlines()[-1])


def quickstart(python: str, work: Path) -> tuple[float, float]:
    """(seconds to the end of step 1, images/s of epoch 2) of one quickstart run."""
    model_dir = work / f"run-{time.monotonic_ns()}"
    command = [python, "-m", "dsl", str(ROOT / "pipelines" / "quickstart.yaml"), "--set", "runner.max_epochs=2",
               "--set", "callbacks[1].every_n_iters=1", "--set", f"runner.model_dir={model_dir}"]
    start = time.perf_counter()
    first_step = throughput = None
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                          cwd=work) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if first_step is None and STEP.match(line):
                first_step = time.perf_counter() - start
            if match := PHASE.match(line):
                throughput = float(match.group(1))
    shutil.rmtree(model_dir, ignore_errors=True)
    if process.returncode or first_step is None or throughput is None:
        raise SystemExit(f"quickstart failed under {python} (exit {process.returncode})")
    return first_step, throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the older stack's Python (with dslrun installed)")
    parser.add_argument("--new", default=str(ROOT / ".venv" / "bin" / "python"), help="this stack's Python")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    stacks = {"old": args.old, "new": args.new}
    results: dict[str, dict[str, list[float]]] = {name: {"import": [], "first": [], "rate": []} for name in stacks}
    with tempfile.TemporaryDirectory(prefix="dslrun-stacks-") as tmp:
        work = Path(tmp)
        subprocess.run([args.new, "-m", "dsl", "data", "synthetic", "--out", str(work / "data" / "synthetic")],
                       env=ENV, check=True, capture_output=True)
        for _ in range(args.repeats):
            for name, python in stacks.items():
                results[name]["import"].append(import_seconds(python))
                first, rate = quickstart(python, work)
                results[name]["first"].append(first)
                results[name]["rate"].append(rate)

    def cell(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    print("| stack | `import tensorflow`, s | start-up to the end of step 1, s | quickstart, images/s (epoch 2) |")
    print("| --- | --- | --- | --- |")
    for name, python in stacks.items():
        r = results[name]
        print(f"| {name}: {versions(python)} | {cell(r['import'], 2)} | {cell(r['first'], 1)} | {cell(r['rate'], 0)} |")
    print(f"\nmedian (min–max) of {args.repeats} interleaved runs each; {os.cpu_count()} cores")


if __name__ == "__main__":
    sys.exit(main())
