"""What this machine can compute, on the threads the bench cases use: the ceiling for their GFLOP/s.

    python bench/peak.py [--seconds 2]

Prints one JSON line: the float32 GFLOP/s of a large `tf.matmul` and of ResNet-32's own
convolutions (forward + both gradients, the three stages' shapes at batch 64) run in a tight
compiled loop, and ResNet-32's forward multiply-adds per 32x32 image, counted from the
network dslrun builds. TensorFlow's thread settings are left at their defaults, as in the
single-process cases, so "fraction of peak" compares like with like.

The matmul is the arithmetic ceiling of the cores (oneDNN's best kernel); the convolutions
are the ceiling for this network's small layers (16-64 channels), which no loop around them
can beat: a case's distance from them is what the rest of the step (batch norm, ReLU, the
optimizer, input, Python) costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# ResNet-32's three stages at batch 64: (spatial size, channels); each 3x3 convolution of a
# stage costs the same multiply-adds, so one of each weighs them as the network does.
STAGES = ((32, 16), (16, 32), (8, 64))


def best_rate(run: Any, flops: float, seconds: float) -> dict[str, float]:
    """GFLOP/s of `run()` (which does `flops` of work): the best and the median of repeated
    calls over about `seconds`. The best is the ceiling; the median says how steady it was."""
    import statistics

    run()  # trace and warm up
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rates) < 3:
        start = time.perf_counter()
        run()
        rates.append(flops / (time.perf_counter() - start) / 1e9)
    return {"best": max(rates), "median": statistics.median(rates), "calls": len(rates)}


def matmul_peak(seconds: float, size: int = 1024, repeats: int = 20) -> dict[str, float]:
    """A chain of `repeats` `size`-square float32 matmuls per compiled call (2 n^3 FLOP each).

    Chained (each multiplies the last result), so they run one after the other on all the
    intra-op threads: independent matmuls ran concurrently on the inter-op threads and
    measured 40 % lower here.
    """
    import tensorflow as tf

    a = tf.random.uniform([size, size])
    b = tf.random.uniform([size, size]) / size  # keeps the chain's values finite

    @tf.function
    def run() -> tf.Tensor:
        x = a
        for _ in tf.range(repeats):
            x = tf.matmul(x, b)
        return x[0, 0]

    return best_rate(lambda: float(run()), 2.0 * size**3 * repeats, seconds)


def conv_peak(seconds: float, batch: int = 64, repeats: int = 10) -> dict[str, Any]:
    """3x3 'same' convolutions of ResNet-32's stage shapes, forward and both gradients (input
    and kernel): 3 x the forward's 2 x MAC FLOP, `repeats` per compiled call.

    Each stage is timed on its own (the small early layers run at half the rate of the late
    ones here); "mix" is the rate over one convolution of each stage, the three weighed
    equally as in the network, so its time is the sum of theirs.
    """
    import tensorflow as tf

    stages: dict[str, Any] = {}
    seconds_per_flop = 0.0
    for size, channels in STAGES:
        x = tf.random.uniform([batch, size, size, channels])
        kernel = tf.Variable(tf.random.normal([3, 3, channels, channels], stddev=0.1))

        @tf.function
        def run(x: tf.Tensor = x, kernel: tf.Variable = kernel) -> tf.Tensor:
            total = tf.constant(0.0)
            for _ in tf.range(repeats):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = tf.nn.conv2d(x, kernel, strides=1, padding="SAME")
                dx, dk = tape.gradient(y, [x, kernel], output_gradients=tf.ones_like(y))
                total += dx[0, 0, 0, 0] + dk[0, 0, 0, 0]  # read, so no gradient is pruned
            return total

        flops = 3 * 2.0 * batch * size * size * channels * channels * 9 * repeats
        stages[f"{size}x{size}x{channels}"] = rate = best_rate(lambda run=run: float(run()), flops, seconds / 3)
        seconds_per_flop += 1 / rate["best"]
    return {"best": len(STAGES) / seconds_per_flop, "stages": stages}


def forward_macs(depth: int = 32) -> int:
    """Multiply-adds of one forward pass of dslrun's `resnet_cifar` on a 32x32x3 image: every
    Conv2D (output pixels x kernel area x input channels x filters) and Dense layer."""
    import tensorflow as tf
    from cases import reference_model

    model = reference_model(argparse.Namespace(depth=depth))
    total = 0
    for layer in model.submodules:
        if isinstance(layer, tf.keras.layers.Conv2D):
            height, width = layer.output.shape[1:3]
            kh, kw, cin, cout = layer.kernel.shape
            total += height * width * kh * kw * cin * cout
        elif isinstance(layer, tf.keras.layers.Dense):
            total += int(layer.kernel.shape[0] * layer.kernel.shape[1])
    return int(total)


def measure(seconds: float) -> dict[str, Any]:
    """The machine's ceilings and ResNet-32's work per image, as one JSON-able record."""
    import tensorflow as tf
    from cases import load_average

    return {
        "case": "peak",
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
        "matmul_gflops": matmul_peak(seconds),
        "conv_gflops": conv_peak(seconds),
        "resnet32_forward_gmac_per_image": forward_macs() / 1e9,
        "loadavg": load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time spent on each measurement")
    print(json.dumps(measure(parser.parse_args().seconds)), flush=True)


if __name__ == "__main__":
    main()
