"""`dslrun validate --world-size N --link RATE`: the gradient exchange of a shipped pipeline, before launching.

The printed figures are the ring model's (dsl/distributed/ring_allreduce.py) for the network's real
gradients, and that model reproduces the exchange measured on the emulated links (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsl.distributed.ring_allreduce import FITTED, Exchange, efficiency, link_bits_per_s

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART_GRADIENT_BYTES = 272_474 * 4  # ResNet-20's trainable parameters, float32
QUICKSTART_TENSORS = 65


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsl", "validate", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_the_plan_prints_the_gradient_bytes_and_the_models_exchange_time() -> None:
    done = validate("pipelines/quickstart.yaml", "pipelines/cifar10_ps.yaml", "--world-size", "64",
                    "--link", "10gbit", "--step-time", "0.2")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("pipelines/quickstart.yaml: gradients"))
    assert f"gradients {QUICKSTART_GRADIENT_BYTES / 1e6:.2f} MB per step in {QUICKSTART_TENSORS} tensors" in line
    exchange = Exchange(64, QUICKSTART_GRADIENT_BYTES, 1, 1e10)  # 1 MB fuses into one 64 MiB buffer
    seconds = FITTED.seconds(exchange)
    assert f"at 64 ranks on 10gbit: {seconds * 1000:.1f} ms per step" in line
    half = FITTED.seconds(Exchange(64, QUICKSTART_GRADIENT_BYTES, 1, 1e10, fp16=True))
    assert f"({half * 1000:.1f} ms with fp16 compression)" in line
    assert f"at a 200 ms step: {efficiency(0.2, seconds) * 100:.0f} %" in line
    ps = next(line for line in done.stdout.splitlines() if line.startswith("pipelines/cifar10_ps.yaml: gradients"))
    assert "no all-reduce" in ps and "1.87 MB per step in 101 tensors" in ps  # ResNet-32


@pytest.mark.slow
def test_the_plan_in_json() -> None:
    done = validate("pipelines/quickstart.yaml", "--world-size", "8", "--link", "2.5gbit", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    details = json.loads(done.stdout)["files"][0]["data"][0]["exchange"]
    assert details["gradient_bytes"] == QUICKSTART_GRADIENT_BYTES and details["tensors"] == QUICKSTART_TENSORS
    expected = FITTED.seconds(Exchange(8, QUICKSTART_GRADIENT_BYTES, 1, link_bits_per_s("2.5gbit")))
    assert details["exchange_s"]["float32"] == pytest.approx(expected)
    assert "efficiency" not in details  # no --step-time


def test_step_time_and_a_bad_link_are_usage_errors() -> None:
    done = validate("pipelines/quickstart.yaml", "--step-time", "0.2")
    assert done.returncode == 2 and "--step-time only applies to --link" in done.stderr
    done = validate("pipelines/quickstart.yaml", "--world-size", "8", "--link", "fast")
    assert done.returncode == 2 and re.search(r"e\.g\. 10gbit", done.stderr)


@pytest.mark.parametrize("link, measured_ms", [("1gbit", 891.2), ("2.5gbit", 386.2), ("10gbit", 164.8)])
def test_the_model_validate_uses_reproduces_the_emulated_measurements(link: str, measured_ms: float) -> None:
    """ResNet-50's 102 MB (214 tensors, two 64 MiB buffers) across 2 test hosts under Horovod/Gloo,
    as `make bench-scaling` measured them (docs/benchmarks.md, "Cost of scale"): within 20 %."""
    modelled = FITTED.seconds(Exchange(2, 102_334_368, 2, link_bits_per_s(link))) * 1000
    assert modelled == pytest.approx(measured_ms, rel=0.2)
