"""`dslrun eval --watch`: every checkpoint of a training run evaluated exactly once.

Train in one process (local backend) while the watcher runs in another; then the counts of
eval records and of checkpoints must agree, and a restarted watcher evaluates nothing twice.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dsl.engine.rundir import clear_done, mark_done, read_done

from e2e_support import DSLRUN, ENV

PIPELINE = """\
version: 1
name: tiny_watch
seed: 11
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
  shuffle_buffer: 64
network: {{type: simple_cnn, filters: [8, 16], dense_units: 32}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: checkpoint, every_n_epochs: 1, max_to_keep: 10}}
runner:
  model_dir: {run}
  max_epochs: 3
  steps_per_call: 2
"""


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture()
def pipeline(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(data), "--num-train", "96", "--num-val", "32",
                    "--num-classes", "4", "--image-size", "16"], check=True, capture_output=True, env=ENV, timeout=120)
    path = tmp_path / "tiny_watch.yaml"
    path.write_text(PIPELINE.format(data=data, run=tmp_path / "run"))
    return path


def test_done_marker_round_trip(tmp_path: Path) -> None:
    assert read_done(tmp_path) is None
    mark_done(tmp_path, 36, str(tmp_path / "checkpoints" / "ckpt-36"))
    assert read_done(tmp_path) == {"step": 36, "checkpoint": "ckpt-36"}
    clear_done(tmp_path)
    assert read_done(tmp_path) is None


def test_watch_options_that_contradict_are_refused(tmp_path: Path) -> None:
    result = subprocess.run([*DSLRUN, "eval", str(tmp_path / "p.yaml"), "--timeout", "3"],
                            capture_output=True, text=True, env=ENV, timeout=60)
    assert result.returncode == 2 and "--timeout only applies to --watch" in result.stderr


@pytest.mark.slow
@pytest.mark.multiprocess
def test_watcher_evaluates_each_checkpoint_of_a_concurrent_run_once(pipeline: Path) -> None:
    run = pipeline.parent / "run"
    watcher = subprocess.Popen([*DSLRUN, "eval", "--watch", str(pipeline), "--timeout", "120"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        trained = subprocess.run([*DSLRUN, str(pipeline)], capture_output=True, text=True, env=ENV, timeout=240)
        assert trained.returncode == 0, trained.stderr
        out, err = watcher.communicate(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, err
    assert "the run is over" in err
    checkpoints = sorted(p.name[: -len(".index")] for p in (run / "checkpoints").glob("*.index"))
    assert checkpoints == ["ckpt-12", "ckpt-18", "ckpt-6"]
    evals = [r for r in records(run) if r["mode"] == "eval"]
    assert sorted(r["checkpoint"] for r in evals) == checkpoints  # each once, none missed
    assert [r["step"] for r in evals] == [6, 12, 18]
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [p["checkpoint"] for p in printed] == ["ckpt-6", "ckpt-12", "ckpt-18"]
    assert list((run / "tensorboard" / "eval").glob("events.out.tfevents.*"))

    # A watcher started after the run: nothing left to evaluate, it stops at once.
    again = subprocess.run([*DSLRUN, "eval", "--watch", str(pipeline), "--timeout", "30"],
                           capture_output=True, text=True, env=ENV, timeout=120)
    assert again.returncode == 0, again.stderr
    assert len([r for r in records(run) if r["mode"] == "eval"]) == 3


@pytest.mark.slow
def test_watcher_gives_up_after_the_timeout(pipeline: Path) -> None:
    result = subprocess.run([*DSLRUN, "eval", "--watch", str(pipeline), "--timeout", "1"],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 1
    assert "no new checkpoint in 1 s" in result.stderr
