"""`validate`, `show`, `schema` and `list` never import TensorFlow, Horovod or mpi4py; nor does a
command refusing a checkpoint path that names nothing.

Each command runs in a fresh interpreter (an import in this test process would hide the
problem), then the interpreter prints which of the heavy packages ended up loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("tensorflow", "keras", "horovod", "mpi4py", "tensorboard")

PROBE = """
import json, sys
from dsl.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
print("\\nLOADED=" + json.dumps(loaded))
"""

PIPELINE = """\
version: 1
inputter:
  type: synthetic
  image_shape: [8, 8, 3]
network:
  type: mlp
modeler:
  type: image_classification
callbacks:
  - type: checkpoint
  - type: progress
runner:
  max_epochs: 1
"""


def loaded_modules(*args: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    code = f"HEAVY = {heavy!r}\n" + PROBE
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[1],
    )
    marker = [line for line in result.stdout.splitlines() if line.startswith("LOADED=")]
    assert marker, f"the probe did not finish:\n{result.stdout}\n{result.stderr}"
    return json.loads(marker[-1].removeprefix("LOADED="))


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "{dir}"],
        ["validate", "--format", "json", "{file}"],
        ["validate", "--data", "{file}"],
        ["show", "{file}"],
        ["schema"],
        ["list"],
        ["list", "--markdown"],
        # A checkpoint path that names nothing is said before TensorFlow loads (a trial waited 10-21 s).
        ["eval", "{file}", "--checkpoint", "{dir}/nowhere"],
        ["predict", "{file}", "{file}", "--checkpoint", "{dir}/nowhere.index"],
        ["export", "{file}", "--out", "{dir}/out", "--checkpoint", "{dir}/nowhere"],
        ["run", "{file}", "--resume-from", "{dir}/nowhere"],
        # So is a data file the workflow reads that is not there (a trial waited 20 s for a typo).
        ["run", "{file}", "--set", "inputter={{type: image_classification_csv, num_classes: 2, train: {dir}/no.csv}}"],
    ],
)
def test_command_does_not_import_heavy_packages(tmp_path: Path, command: list[str]) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "bad.yaml").write_text("version: 2\n", encoding="utf-8")
    args = [part.format(dir=tmp_path, file=pipeline) for part in command]
    assert loaded_modules(*args) == []


def test_the_probe_sees_what_is_loaded() -> None:
    assert loaded_modules("list", heavy=("click", "dsl", "no_such_package")) == ["click", "dsl"]
