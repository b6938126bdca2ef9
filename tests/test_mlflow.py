"""The `mlflow` callback: what validate says without MLflow.

The callback against a real tracking server (a sweep as the parent run of its trials, a
resumed trial continuing its run) is tested with the sweep it tracks, in
tests/test_sweep_e2e.py, so that one trained study serves both (test time).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from e2e_support import MULTIRANK_ENV

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"


def test_validate_names_the_extra_when_mlflow_is_missing(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(f"extends: {QUICKSTART}\ncallbacks:\n  - type: mlflow\n", encoding="utf-8")
    # A Python that finds no mlflow: the venv's, with the package's import path hidden.
    code = ("import importlib.util, sys; real = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda name, *a: None if name == 'mlflow' else real(name, *a); "
            "from dsl.cli import main; sys.argv = ['dslrun', 'validate', sys.argv[1]]; main()")
    result = subprocess.run([sys.executable, "-c", code, str(file)], capture_output=True, text=True, env=MULTIRANK_ENV)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{file}:3:11: error: callbacks[0].type: the mlflow callback needs MLflow, which is not installed; install MLflow "
        'with: pip install "dslrun[mlflow]" (or pip install mlflow)'
    ]
