"""TensorFlow >= 2.19's start-up lines are filtered as TF_CPP_MIN_LOG_LEVEL asks (dsl.engine._native_logs)."""

import os
import subprocess
import sys

from dsl.engine._native_logs import keep

HEADER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
INFO = "I0000 00:00:1795568440.382882   27017 port.cc:153] oneDNN custom operations are on.\n"
CUINIT = "E0000 00:00:1795568444.426514   27017 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n"


def test_the_level_decides_and_the_absl_header_and_a_driverless_cuinit_are_dropped() -> None:
    assert not keep(HEADER, 0, nvidia_driver=False)
    assert keep(INFO, 0, nvidia_driver=False) and not keep(INFO, 1, nvidia_driver=False)
    assert not keep(CUINIT, 0, nvidia_driver=False)
    assert keep(CUINIT, 2, nvidia_driver=True) and not keep(CUINIT, 3, nvidia_driver=True)
    assert keep("Traceback (most recent call last):\n", 3, nvidia_driver=False)


def test_importing_tensorflow_after_dsl_engine_prints_nothing_at_level_2() -> None:
    code = "import dsl.engine, tensorflow as tf; print(tf.constant(2) + 1)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and "3" in result.stdout
