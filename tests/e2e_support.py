"""What the end-to-end tests share: how to run dslrun as a user does, and tiny data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DSLRUN = [sys.executable, "-m", "dsl"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
# For horovodrun/mpirun: the venv's launchers on PATH, and OpenMPI allowed to run as root.
MULTIRANK_ENV = {
    **ENV,
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}


def dslrun(*args: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    """`dslrun ARGS` in a subprocess; with `check`, a non-zero exit fails with its output."""
    result = subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env=ENV, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"dslrun {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def synthetic_data(out: Path, num_train: int, num_val: int, image_size: int, num_classes: int = 4) -> Path:
    """A small learnable CSV+PNG set written by `dslrun data synthetic`."""
    dslrun("data", "synthetic", "--out", str(out), "--num-train", str(num_train), "--num-val", str(num_val),
           "--num-classes", str(num_classes), "--image-size", str(image_size))
    return out
