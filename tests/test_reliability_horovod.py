"""Exact resume with two Horovod ranks (horovodrun --gloo): a job SIGKILLed mid-epoch and rerun
ends with the same bits as one never interrupted. Run alone with `pytest -m multiprocess`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

from e2e_support import MULTIRANK_ENV as ENV
from e2e_support import kill_group

HOROVODRUN = ["horovodrun", "-np", "2", "--gloo", "dslrun"]

PIPELINE = """\
version: 1
name: exact-hvd
seed: 3
deterministic: true
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  num_classes: 4
  image_shape: [8, 8, 3]
  batch_size: 8
  shuffle_buffer: 64
augmenter: {{type: cifar, padding: 2}}
network: {{type: simple_cnn, filters: [4], dense_units: 16, dropout: 0.5}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: checkpoint, every_n_iters: 1, max_to_keep: 100}}
runner:
  model_dir: {run}
  workflow: [[train, 1]]
  max_epochs: 2
  batch_scaling: linear
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hvd-exact") / "synthetic"
    subprocess.run([sys.executable, "-m", "dsl", "data", "synthetic", "--out", str(out), "--num-train", "96",
                    "--num-val", "16", "--num-classes", "4", "--image-size", "8"], check=True, env=ENV,
                   capture_output=True)
    return out


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen([*HOROVODRUN, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=ENV, start_new_session=True)


def finish(process: subprocess.Popen, timeout: int = 240) -> str:
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        kill_group(process)
    assert process.returncode == 0, output[-3000:]
    return output


def arrays(prefix: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(prefix))}


def test_two_ranks_killed_mid_epoch_resume_bit_identical(tmp_path: Path, data: Path) -> None:
    reference = tmp_path / "ref.yaml"
    reference.write_text(PIPELINE.format(data=data, run=tmp_path / "run-ref"))
    interrupted = tmp_path / "cut.yaml"
    interrupted.write_text(PIPELINE.format(data=data, run=tmp_path / "run-cut"))
    finish(start(reference))

    checkpoints = tmp_path / "run-cut" / "checkpoints"
    process = start(interrupted)
    deadline = time.time() + 180
    try:  # 96 examples / (8 x 2 ranks) = 6 steps an epoch: step 4 is mid-epoch 1
        while not (checkpoints / "ckpt-4.index").exists():
            assert process.poll() is None and time.time() < deadline, process.communicate()[0][-3000:]
            time.sleep(0.05)
    finally:
        kill_group(process)  # SIGKILL to horovodrun and both ranks
    output = finish(start(interrupted))
    assert "resumed from" in output and "identical on all 2 ranks" in output

    final, expected = arrays(checkpoints / "ckpt-12"), arrays(tmp_path / "run-ref" / "checkpoints" / "ckpt-12")
    assert final.keys() == expected.keys() and any(name.startswith("rng/") for name in final)
    assert [name for name in final if not np.array_equal(final[name], expected[name])] == []


def test_two_ranks_agree_a_finished_run_is_finished_and_continue_a_longer_one(tmp_path: Path, data: Path) -> None:
    """Both ranks skip the val phase and stop alike: a rank that evaluated alone would wait in its allreduce."""
    pipeline = tmp_path / "val.yaml"
    pipeline.write_text(PIPELINE.format(data=data, run=tmp_path / "run")
                        .replace("  num_classes: 4", f"  val: {data}/eval.csv\n  num_classes: 4")
                        .replace("workflow: [[train, 1]]", "workflow: [[train, 1], [val, 1]]")
                        .replace("max_epochs: 2", "max_epochs: 1"))
    finish(start(pipeline))
    metrics = tmp_path / "run" / "metrics.jsonl"
    before = metrics.read_text()
    output = finish(start(pipeline), timeout=120)
    assert f"already finished at step 6 ({tmp_path / 'run'})" in output
    assert metrics.read_text() == before

    process = subprocess.Popen([*HOROVODRUN, str(pipeline), "--set", "runner.max_epochs=2"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    assert "resumed from" in finish(process)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(r["mode"], r["step"]) for r in records] == [("train", 6), ("val", 6), ("train", 12), ("val", 12)]
