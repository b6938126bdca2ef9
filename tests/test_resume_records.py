"""A resumed run records each phase once: metrics.jsonl, csv_logger's file and MLflow.

A checkpoint is written when a train phase ends, so a run killed after the val phase that follows
(or later, before the next checkpoint) resumes before it and runs those phases again, on the same
weights, to the same values. They used to be recorded a second time: two `val` records at one
step in metrics.jsonl and the CSV, two points at one step of each MLflow curve, and the train step
values MLflow had taken since the checkpoint sent again. The run directory is put back into the
state such a kill leaves (the newest checkpoint gone, the records kept) rather than killed at a
moment that a fast run may pass before the signal lands.
"""

from __future__ import annotations

import collections
import json
import subprocess
from pathlib import Path

import pytest

from e2e_support import DSLRUN, ENV, synthetic_data


def dslrun(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """dslrun in `cwd`: MLflow puts a database store's artifacts in ./mlruns of the working directory."""
    result = subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env=ENV, timeout=300, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return result

PIPELINE = """\
version: 1
name: records
seed: 3
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [8, 8, 3]
  batch_size: 8
augmenter: {{type: none}}
network: {{type: simple_cnn, filters: [4], dense_units: 8}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05}}
callbacks:
  - {{type: train_loss, every_n_iters: 4}}
  - {{type: val_basic}}
  - {{type: checkpoint, every_n_epochs: 1, max_to_keep: 5}}
  - {{type: csv_logger}}
  - {{type: mlflow, tracking_uri: "sqlite:///{store}", every_n_iters: 4}}
runner:
  model_dir: {run}
  workflow: [[train, 1], [val, 1]]
  max_epochs: 2
"""


def rewind_to(run: Path, step: int) -> None:
    """The run directory as a SIGKILL after the last phase record and before the next checkpoint
    leaves it: checkpoints after `step` gone (the write they stand for never finished), records kept."""
    checkpoints = run / "checkpoints"
    for path in checkpoints.glob("ckpt-*"):
        if int(path.name.split(".")[0].split("-")[1]) > step:
            path.unlink()
    (checkpoints / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n'
                                            f'all_model_checkpoint_paths: "ckpt-{step}"\n')
    (run / "DONE").unlink()


def phases(run: Path) -> list[tuple[str, int, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["mode"], r["step"], r["loss"]) for r in records]


def test_a_resumed_run_records_the_phases_it_runs_again_once(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    data = synthetic_data(tmp_path / "data", 48, 16, 8)
    run, store = tmp_path / "run", tmp_path / "mlflow.db"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(data=data, run=run, store=store))
    dslrun(str(pipeline), cwd=tmp_path)
    uninterrupted = phases(run)
    assert [(mode, step) for mode, step, _ in uninterrupted] == [("train", 6), ("val", 6), ("train", 12), ("val", 12)]
    csv_rows = (run / "history.csv").read_text().splitlines()
    assert len(csv_rows) == 5

    rewind_to(run, 6)
    resumed = dslrun(str(pipeline), cwd=tmp_path)
    assert "resumed from" in resumed.stderr and "ckpt-6 at step 6" in resumed.stderr, resumed.stderr
    assert phases(run) == uninterrupted  # the three phases after ckpt-6 ran again and were not written again
    assert (run / "history.csv").read_text().splitlines() == csv_rows

    client = MlflowClient(f"sqlite:///{store}")
    run_id = json.loads((run / "mlflow.json").read_text())["run_id"]
    for key in client.get_run(run_id).data.metrics:
        steps = collections.Counter(point.step for point in client.get_metric_history(run_id, key))
        assert max(steps.values()) == 1, (key, steps)
    assert {"train/loss", "val/loss", "train_epoch/loss"} <= set(client.get_run(run_id).data.metrics)

    # A checkpoint the user names (--resume-from) may start another path (here: another rate): the
    # phases whose values differ are recorded, beside the ones of the path it left; val 6, on the
    # checkpoint's own weights, is the same phase again.
    dslrun(str(pipeline), "--resume-from", str(run / "checkpoints" / "ckpt-6"),
           "--set", "modeler.optimizer.learning_rate=0.2", cwd=tmp_path)
    assert [(mode, step) for mode, step, _ in phases(run)][4:] == [("train", 12), ("val", 12)]
    assert phases(run)[4][2] != uninterrupted[2][2]
