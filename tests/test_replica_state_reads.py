"""Batch-norm statistics averaged where they are read give the model that averaging after every
call gives (dsl/engine/replicas.py): 2 Horovod ranks and 2 collective workers, each run both ways.

A 20-step run in two train phases of 10 (val after each) with a checkpoint every 3 steps: the
reads come at phase ends, at the 16-step agreement point and at checkpoints between them (the
`checkpoint` callback's `reads_replica_state`). Every checkpoint, every val record and the final
model of the two rules agree to 1e-6 (a moving average is linear; only rounding differs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsl.commands._tasks import free_ports

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

EVERY_CALL = [sys.executable, str(Path(__file__).with_name("replica_state_every_call.py"))]

PIPELINE = """\
version: 1
name: reads
seed: 5
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
augmenter: {{type: none}}
network: {{type: simple_cnn, filters: [8], dense_units: 16, batch_norm: true}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: val_basic}}
  - {{type: checkpoint, every_n_epochs: null, every_n_iters: 3, max_to_keep: 100}}
runner:
  backend: {backend}
  model_dir: {run}
  workflow: [[train, 10], [val, 1]]
  max_epochs: null
  max_iters: 20
  batch_scaling: none
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reads") / "synthetic"
    subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(out), "--num-train", "320", "--num-val", "32",
                    "--num-classes", "4", "--image-size", "16"], check=True, env=MULTIRANK_ENV, capture_output=True)
    return out


def run_together(commands: list[tuple[list[str], dict[str, str]]], timeout: float = 300) -> list[str]:
    """Start every process at once (both rules side by side), wait for all; their outputs. None may fail or stay."""
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**MULTIRANK_ENV, **env}, start_new_session=True) for command, env in commands]
    try:
        outputs = [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            kill_group(process)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    return outputs


def model_arrays(run: Path, step: int) -> dict[str, np.ndarray]:
    import tensorflow as tf

    prefix = str(run / "checkpoints" / f"ckpt-{step}")
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(prefix) if name.startswith("model/")}


def assert_same_runs(read: Path, every_call: Path) -> None:
    steps = [3, 6, 9, 12, 15, 18, 20]
    for step in steps:
        ours, theirs = model_arrays(read, step), model_arrays(every_call, step)
        assert any("moving_variance" in name for name in ours) and ours.keys() == theirs.keys()
        for name in ours:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=1e-6, err_msg=f"{name} at step {step}")
    vals = [[r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["mode"] == "val"]
            for run in (read, every_call)]
    assert [r["step"] for r in vals[0]] == [r["step"] for r in vals[1]] == [10, 20]
    for ours, theirs in zip(*vals):
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-6)
        assert ours["accuracy"] == pytest.approx(theirs["accuracy"], abs=1e-6)
    # The statistics moved between the checkpoints compared: the tolerance means something.
    first, last = model_arrays(read, 3), model_arrays(read, 20)
    assert max(float(np.max(np.abs(first[n] - last[n]))) for n in first if "moving_" in n) > 1e-2


def write(tmp_path: Path, data: Path, name: str, backend: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(PIPELINE.format(data=data, run=tmp_path / f"run-{name}", backend=backend))
    return path


def test_horovod_ranks_averaging_where_read_end_as_averaging_every_call(tmp_path: Path, data: Path) -> None:
    launcher = ["horovodrun", "-np", "2", "--gloo"]
    read, every = write(tmp_path, data, "read", "horovod"), write(tmp_path, data, "every", "horovod")
    outputs = run_together([([*launcher, *DSLRUN, str(read)], {}), ([*launcher, *EVERY_CALL, str(every)], {})])
    assert all("identical on all 2 ranks" in output for output in outputs), outputs[0][-2000:]
    assert_same_runs(tmp_path / "run-read", tmp_path / "run-every")


def test_collective_workers_averaging_where_read_end_as_averaging_every_call(tmp_path: Path, data: Path) -> None:
    commands = []
    for name, program in (("read", DSLRUN), ("every", EVERY_CALL)):
        path = write(tmp_path, data, name, "collective")
        cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
        for index in range(2):
            config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            commands.append(([*program, str(path)], {"TF_CONFIG": config}))
    outputs = run_together(commands)
    assert "identical on all 2 ranks" in outputs[0] and "identical on all 2 ranks" in outputs[2], outputs[0][-2000:]
    assert_same_runs(tmp_path / "run-read", tmp_path / "run-every")
