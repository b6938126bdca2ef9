"""The gradient tensor sets of the exchange bench, and ResNet-32's CPU step on this machine.

Writes JSON: `sets` maps a name to the shapes of a network's trainable variables (its
gradients' shapes): `resnet32` built by dslrun's own `resnet_cifar` builder (depth 32, as
pipelines/cifar10.yaml and quickstart.yaml ship it), `resnet50` from
`tf.keras.applications.ResNet50(weights=None)` (nothing downloaded), `resnet101` likewise
(for the projection only), and with `--pipelines`
every shipped pipeline's network, built as `dslrun validate --build` builds it. `step` is
the median time of one ResNet-32 train step (batch 64, momentum SGD, one process, every
core), the compute a rank of the projection overlaps its exchange with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]


def shapes_of(model: Any) -> list[list[int]]:
    return [[int(d) for d in v.shape] for v in model.trainable_variables]


def resnet32() -> Any:
    from dsl.language.context import BuildContext
    from dsl.language.registry import lookup

    component = lookup("network", "resnet_cifar")
    params = {"type": "resnet_cifar", "depth": 32}
    params.update({k: v["default"] for k, v in component.params.items() if k not in params and "default" in v})
    return component.builder(params, BuildContext(pipeline={}, image_shape=(32, 32, 3), num_classes=10))


def resnet50() -> Any:
    import tensorflow as tf

    return tf.keras.applications.ResNet50(weights=None)


def pipeline_network(path: Path) -> Any:
    """The pipeline's network built as `dslrun validate --build` builds it (declared shapes, zeros)."""
    from dsl.engine import build_check
    from dsl.language.pipeline import check_pipeline_with_sources
    from dsl.language.registry import lookup
    from dsl.language.resolved import Pipeline
    from dsl.language.rules import declare

    resolved, _, sources = check_pipeline_with_sources(str(path))
    if resolved is None or sources is None:
        raise ValueError(f"{path}: does not validate")
    inputter = lookup("inputter", resolved["inputter"]["type"])
    return build_check._trace(Pipeline.from_resolved(resolved), sources, declare(resolved, inputter.facts),
                              inputter.batch)


def step_time(model: Any, batch: int = 64, warmup: int = 5, timed: int = 20) -> float:
    """Median seconds of one train step of `model` on random 32x32x3 images."""
    import tensorflow as tf

    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    images = tf.random.uniform((batch, 32, 32, 3))
    labels = tf.random.uniform((batch,), maxval=10, dtype=tf.int32)

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            value = loss(labels, model(images, training=True))
        optimizer.apply_gradients(zip(tape.gradient(value, model.trainable_variables), model.trainable_variables))
        return value

    for _ in range(warmup):
        step().numpy()
    times = []
    for _ in range(timed):
        started = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pipelines", action="store_true", help="also every shipped pipeline's network")
    args = parser.parse_args()
    model = resnet32()
    import tensorflow as tf

    sets: dict[str, Any] = {"resnet32": shapes_of(model), "resnet50": shapes_of(resnet50()),
                            "resnet101": shapes_of(tf.keras.applications.ResNet101(weights=None))}
    found: dict[str, Any] = {"sets": sets, "step": {"resnet32_batch64_cpu_s": step_time(model), "cores": os.cpu_count()}}
    if args.pipelines:
        for path in sorted((ROOT / "pipelines").glob("*.yaml")):
            try:
                sets[f"pipeline:{path.name}"] = shapes_of(pipeline_network(path))
            except Exception as exc:  # a pipeline that cannot be built here is reported, not fatal
                found.setdefault("skipped", {})[path.name] = str(exc).splitlines()[0][:200]
    Path(args.out).write_text(json.dumps(found))
    for name, shapes in sets.items():
        count = sum(_elements(shape) for shape in shapes)
        print(f"{name}: {len(shapes)} tensors, {count:,} parameters, {count * 4 / 1e6:.2f} MB")
    print(f"ResNet-32 train step, batch 64, here: {found['step']['resnet32_batch64_cpu_s'] * 1000:.0f} ms")


def _elements(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


if __name__ == "__main__":
    main()
