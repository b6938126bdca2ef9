"""How long `dslrun validate` takes on 50 pipelines, next to merely importing TensorFlow.

Writes 50 pipeline files into a temporary directory (variants of one pipeline built from the
registered types), then times, as subprocess wall time and interleaved so that machine load
hits both alike:

    dslrun validate DIR
    python -c "import tensorflow"

and prints the medians. The goal is under 0.5 s for the 50 files.

Then, in this process, the JSON Schema step alone on the same 50 pipelines (valid, and each
with one mistake): dslrun's validator (one cached jsonschema validator per component, chosen
by each section's `type`) against one jsonschema validator of the whole schema, which tries
every type's `if` branch on every section. First pass (validators built) and later passes.

    .venv/bin/python bench/validate_speed.py [--repeats 5] [--files 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIPELINE = """\
version: 1
name: bench-{index}
description: variant {index} of the validate benchmark
seed: {index}
inputter:
  type: synthetic
  num_examples: {{train: {train}, val: 64}}
  image_shape: [16, 16, 3]
  batch_size: {batch}
augmenter:
  type: {augmenter}
network:
  type: {network}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.1}}
callbacks:
  - type: checkpoint
    every_n_epochs: 2
  - type: progress
runner:
  max_epochs: {epochs}
  workflow: [[train, 1], [val, 1]]
"""


def write_pipelines(directory: Path, count: int) -> None:
    from dsl.language import registry

    networks = [n for n in ("mlp", "simple_cnn", "resnet_cifar") if n in registry.types("network")] or registry.types("network")
    augmenters = registry.types("augmenter") or ["none"]
    for index in range(count):
        text = PIPELINE.format(
            index=index,
            train=128 * (1 + index % 4),
            batch=8 * (1 + index % 3),
            augmenter=augmenters[index % len(augmenters)],
            network=networks[index % len(networks)],
            epochs=1 + index % 5,
        )
        (directory / f"pipeline_{index:02d}.yaml").write_text(text, encoding="utf-8")


def schema_step_times(directory: Path, repeats: int) -> dict[str, tuple[float, float]]:
    """{validator: (first pass, median later pass)} seconds to validate every pipeline of `directory`."""
    import copy

    from jsonschema import Draft202012Validator

    from dsl.language import schema
    from dsl.language.resolve import resolve

    trees = [resolve(path, (), {}).value for path in sorted(directory.glob("*.yaml"))]
    broken = [_with_one_mistake(copy.deepcopy(tree), index) for index, tree in enumerate(trees)]
    whole = Draft202012Validator(schema.pipeline_schema())
    candidates = {
        "per component (dslrun)": lambda tree: schema.validator().errors(tree),
        "whole schema (jsonschema)": lambda tree: list(whole.iter_errors(tree)),
    }
    results = {}
    for name, check in candidates.items():
        for label, batch in (("valid", trees), ("one error each", broken)):
            passes = []
            for _ in range(1 + repeats):
                start = time.perf_counter()
                for tree in batch:
                    check(tree)
                passes.append(time.perf_counter() - start)
            results[f"{name}, {label}"] = (passes[0], statistics.median(passes[1:]))
    return results


def _with_one_mistake(tree: dict, index: int) -> dict:
    """A misspelt key, a value of the wrong type or an unknown callback type, in turn."""
    if index % 3 == 0:
        tree["modeler"]["optimizer"]["momemtum"] = 0.9
    elif index % 3 == 1:
        tree["inputter"]["batch_size"] = "8"
    else:
        tree["callbacks"][0]["type"] = "checkpoints"
    return tree


def import_time(module: str) -> float:
    """Seconds a fresh interpreter spends importing `module` (its own share, -X importtime)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                            capture_output=True, text=True, check=True)
    last = [line for line in result.stderr.splitlines() if line.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1]) / 1e6


def wall_time(command: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):
        sys.stderr.write(result.stderr)
    return elapsed, result.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--files", type=int, default=50)
    args = parser.parse_args()

    bin_dir = Path(sys.executable).parent
    dslrun = str(bin_dir / "dslrun")
    env_note = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="dslrun-bench-") as tmp:
        directory = Path(tmp)
        write_pipelines(directory, args.files)
        validate_times, tf_times = [], []
        status = None
        for _ in range(args.repeats):
            elapsed, status = wall_time([dslrun, "validate", str(directory)])
            validate_times.append(elapsed)
            elapsed, _ = wall_time([sys.executable, "-c", "import tensorflow"])
            tf_times.append(elapsed)
    print(f"dslrun validate ({args.files} files, exit {status}): median {statistics.median(validate_times):.3f} s "
          f"(min {min(validate_times):.3f}, max {max(validate_times):.3f})")
    print(f"python -c 'import tensorflow': median {statistics.median(tf_times):.3f} s "
          f"(min {min(tf_times):.3f}, max {max(tf_times):.3f})")
    goal = statistics.median(validate_times) < 0.5
    print(f"goal < 0.5 s for {args.files} files: {'met' if goal else 'NOT met'}")
    print(f"import jsonschema: {import_time('jsonschema'):.3f} s")
    with tempfile.TemporaryDirectory(prefix="dslrun-bench-") as tmp:
        write_pipelines(Path(tmp), args.files)
        for name, (first, later) in schema_step_times(Path(tmp), args.repeats).items():
            print(f"schema step, {args.files} files, {name}: first {first * 1000:.1f} ms, then median {later * 1000:.1f} ms")
    if env_note is None:
        os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


if __name__ == "__main__":
    main()
