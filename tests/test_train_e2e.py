"""End-to-end: real `dslrun` processes train, resume, evaluate, predict and export.

Everything runs on a tiny generated data set (16x16, 4 classes) so the whole file stays
around a minute on two cores.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

from e2e_support import DSLRUN, ENV, dslrun

PIPELINE = """\
version: 1
name: tiny
seed: 5
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
  shuffle_buffer: 256
augmenter: {{type: cifar, padding: 2}}
network: {{type: simple_cnn, filters: [8, 16], dense_units: 32}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: checkpoint, every_n_epochs: 1, max_to_keep: 10, save_best: {{monitor: val/accuracy}}}}
  - {{type: train_summary, every_n_iters: 5}}
runner:
  model_dir: {run}
  workflow: [[train, 1], [val, 1]]
  max_epochs: 3
  steps_per_call: 2
"""



@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "synthetic"
    dslrun("data", "synthetic", "--out", str(out), "--num-train", "192", "--num-val", "64",
           "--num-classes", "4", "--image-size", "16")
    return out


def write_pipeline(tmp_path: Path, data: Path, **replace: str) -> Path:
    text = PIPELINE.format(data=data, run=tmp_path / "run")
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return path


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    """One finished 3-epoch run shared by the tests that only read it."""
    tmp = tmp_path_factory.mktemp("trained")
    pipeline = write_pipeline(tmp, data)
    # Its own temporary directory, bytecode written as a user's Python does by default: what
    # autograph leaves there is looked at below.
    env = {key: value for key, value in ENV.items() if key != "PYTHONDONTWRITEBYTECODE"}
    (tmp / "tmp").mkdir()
    result = dslrun(str(pipeline), env={**env, "TMPDIR": str(tmp / "tmp")})
    assert "final validation" in result.stdout
    return pipeline


def test_a_run_leaves_nothing_in_the_temporary_directory(trained: Path) -> None:
    """Autograph's modules and the bytecode Python cached for them are gone when the run ends."""
    tmp = trained.parent / "tmp"
    assert (tmp / "__pycache__").is_dir()  # autograph's modules were written and compiled here
    assert not list(tmp.rglob("__autograph_generated_file*")), sorted(tmp.rglob("*"))


def test_training_learns_and_fills_the_run_directory(trained: Path) -> None:
    run = trained.parent / "run"
    history = records(run)
    train = [r for r in history if r["mode"] == "train"]
    val = [r for r in history if r["mode"] == "val"]
    assert [r["epoch"] for r in train] == [1, 2, 3]
    assert train[-1]["loss"] < train[0]["loss"]
    assert val[-1]["accuracy"] > 0.5  # four classes: chance is 0.25
    # Each val record has the per-class table (flat, for per-epoch plots); the latest matrix is drawn beside it.
    assert {"precision_3", "recall_3", "f1_3"} <= val[-1].keys() and sum(val[-1][f"support_{k}"] for k in range(4)) == 64
    assert (run / "confusion_matrix_val.png").read_bytes().startswith(b"\x89PNG")
    assert (run / "pipeline.yaml").read_text().startswith("version: 1")
    assert sorted(p.name for p in (run / "checkpoints").glob("*.index")) == [
        "ckpt-12.index", "ckpt-24.index", "ckpt-36.index"
    ]
    assert list((run / "tensorboard" / "train").glob("events.out.tfevents.*"))


def test_eval_reproduces_the_logged_accuracy(trained: Path) -> None:
    run = trained.parent / "run"
    logged = [r for r in records(run) if r["mode"] == "val"][-1]
    output = dslrun("eval", str(trained))
    result = json.loads(output.stdout.strip().splitlines()[-1])
    assert result["step"] == 36
    assert output.stderr.startswith(f"dslrun: using checkpoint {run / 'checkpoints' / 'ckpt-36'} (step 36)")
    assert result["accuracy"] == pytest.approx(logged["accuracy"], abs=1e-6)
    assert result["loss"] == pytest.approx(logged["loss"], rel=1e-5)
    assert result["macro_f1"] == pytest.approx(logged["macro_f1"], abs=1e-6)
    # Per-class results from one confusion matrix (rows true, columns predicted) over the 64 val images.
    matrix = result["confusion_matrix"]
    assert sum(map(sum, matrix)) == 64 and [row["support"] for row in result["per_class"]] == [sum(r) for r in matrix]
    hits = sum(matrix[k][k] for k in range(4))
    assert hits / 64 == pytest.approx(result["accuracy"], abs=1e-6)
    for k, row in enumerate(result["per_class"]):
        predicted = sum(matrix[t][k] for t in range(4))
        assert row["precision"] == pytest.approx(matrix[k][k] / predicted if predicted else 0.0, abs=1e-6)
        assert row["recall"] == pytest.approx(matrix[k][k] / row["support"], abs=1e-6)
    png = run / "confusion_matrix_val.png"
    assert result["confusion_matrix_png"] == str(png) and png.read_bytes().startswith(b"\x89PNG")
    assert list((run / "tensorboard" / "eval").glob("events.out.tfevents.*"))
    # The val phase's record holds the same per-class table the eval of its checkpoint prints.
    for row in result["per_class"]:
        for value in ("precision", "recall", "f1", "support"):
            assert logged[f"{value}_{row['class']}"] == pytest.approx(row[value], abs=1e-6), (value, row)
    # ... and each val phase drew its matrix in TensorBoard (the run's val directory).
    events = b"".join(p.read_bytes() for p in (run / "tensorboard" / "val").glob("events.out.tfevents.*"))
    assert events.count(b"val/confusion_matrix") >= 3


def test_export_reload_gives_the_same_predictions(trained: Path, data: Path, tmp_path: Path) -> None:
    images = sorted(str(p) for p in (data / "eval").glob("*.png"))[:4]
    predicted = [json.loads(line) for line in dslrun("predict", str(trained), *images).stdout.splitlines()]
    assert [p["image"] for p in predicted] == images
    out = tmp_path / "saved"
    dslrun("export", str(trained), "--out", str(out))

    script = (
        "import json, sys, numpy as np, tensorflow as tf\n"
        "from PIL import Image\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "x = np.stack([np.asarray(Image.open(p).convert('RGB'), np.float32) / 255 for p in sys.argv[2:]])\n"
        "r = m.signatures['serving_default'](images=tf.constant(x))\n"
        "print(json.dumps({'classes': r['classes'].numpy().tolist(), 'probabilities': r['probabilities'].numpy().tolist()}))\n"
    )
    out_json = subprocess.run([sys.executable, "-c", script, str(out), *images], capture_output=True,
                              text=True, env=ENV, check=True).stdout
    served = json.loads(out_json)
    assert served["classes"] == [p["class"] for p in predicted]
    for row, p in zip(served["probabilities"], predicted):
        assert row == pytest.approx(p["probabilities"], abs=1e-5)


def test_the_best_model_serves_eval_predict_and_export(trained: Path, data: Path, tmp_path: Path) -> None:
    best_dir = trained.parent / "run" / "best"
    best = json.loads((best_dir / "best.json").read_text())
    prefix = best_dir / best["checkpoint"]
    result = dslrun("eval", str(trained), "--checkpoint", "best")
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert (record["checkpoint"], record["step"], record["epoch"]) == (str(prefix), best["step"], best["epoch"])
    assert record["accuracy"] == pytest.approx(best["value"], abs=1e-6)
    assert result.stderr.startswith(f"dslrun: using checkpoint {prefix} (step {best['step']}, best val/accuracy "
                                    f"{best['value']:.4f})"), result.stderr  # rounded as the phase lines are (trial A9)

    images = sorted(str(p) for p in (data / "eval").glob("*.png"))[:2]
    predicted = dslrun("predict", str(trained), *images, "--checkpoint", str(prefix)).stdout.splitlines()
    assert [json.loads(line)["image"] for line in predicted] == images
    # The prefix's .index file, as a file browser offers it, names the same checkpoint (a trial got
    # "expected ... a prefix with ckpt-140.index.index").
    by_index = dslrun("eval", str(trained), "--checkpoint", f"{prefix}.index")
    assert json.loads(by_index.stdout.strip().splitlines()[-1])["checkpoint"] == str(prefix)
    out = tmp_path / "saved"
    exported = dslrun("export", str(trained), "--out", str(out), "--checkpoint", str(best_dir))
    assert f"exported {prefix} to {out}" in exported.stdout and (out / "saved_model.pb").exists()


def test_checkpoint_errors_name_the_flag_the_user_gave(trained: Path, data: Path, tmp_path: Path) -> None:
    missing = trained.parent / "run" / "nonexist"
    expected = f"dslrun: error: --checkpoint {missing}: no such checkpoint (expected a directory or a prefix with"
    image = str(sorted((data / "eval").glob("*.png"))[0])
    for command in (("eval",), ("predict", image), ("export", "--out", str(tmp_path / "nowhere"))):
        result = dslrun(command[0], str(trained), *command[1:], "--checkpoint", str(missing), check=False)
        assert result.returncode == 1 and result.stderr.startswith(expected), result.stderr
    empty = tmp_path / "no-best"
    result = dslrun("export", str(trained), "--out", str(tmp_path / "out"), "--checkpoint", "best",
                    "--set", f"runner.model_dir={empty}", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith(f"dslrun: error: --checkpoint best: {empty} has no best model"), result.stderr
    best = trained.parent / "run" / "best"
    result = dslrun(str(trained), "--resume-from", str(best), "--set", f"runner.model_dir={empty}", check=False)
    assert result.returncode == 1 and "holds the model's weights only" in result.stderr and "init_checkpoint" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_finished_run_run_again_writes_nothing_and_a_longer_one_continues(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data)
    run = tmp_path / "run"
    first = dslrun(str(pipeline), "--set", "runner.max_epochs=1")
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}
    result = dslrun(str(pipeline), "--set", "runner.max_epochs=1")
    assert result.stderr == f"dslrun: already finished at step 12 ({run}); raise runner.max_epochs (1) to train further\n"
    # It still reports its final validation, from its records (the README promises it for `make demo`).
    final = [line for line in first.stdout.splitlines() if line.startswith("dslrun: final validation (step 12): ")]
    assert final and result.stdout == final[0] + "\n"
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()} == before

    result = dslrun(str(pipeline), "--set", "runner.max_epochs=2")
    assert "resumed from" in result.stderr and "at step 12" in result.stderr
    history = records(run)
    for mode in ("train", "val"):  # the val phase of epoch 1 ran once, before the first run ended
        assert [(r["epoch"], r["step"]) for r in history if r["mode"] == mode] == [(1, 12), (2, 24)]


def test_killed_run_continues_from_its_last_checkpoint(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data)
    checkpoints = tmp_path / "run" / "checkpoints"
    process = subprocess.Popen([*DSLRUN, str(pipeline), "--set", "runner.max_epochs=6"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.time() + 240
        while not list(checkpoints.glob("ckpt-12.index")) and time.time() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL
    result = dslrun(str(pipeline), "--set", "runner.max_epochs=6")
    assert "resumed from" in result.stderr
    train = [r for r in records(tmp_path / "run") if r["mode"] == "train"]
    assert train[-1]["step"] == 72 and train[-1]["epoch"] == 6


def test_sigterm_saves_a_checkpoint_and_exits_nonzero(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, **{"max_epochs: 3": "max_epochs: 50"})
    process = subprocess.Popen([*DSLRUN, str(pipeline)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=ENV)
    events = tmp_path / "run" / "tensorboard" / "train"
    deadline = time.time() + 240
    while not list(events.glob("events.*")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted by SIGTERM: saved a checkpoint" in stderr
    assert "finished at step" not in stdout  # only what happened: interrupted
    assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.index"))
    # The cut-short epoch is recorded as what it is, not under the last complete epoch's number.
    train = [r for r in records(tmp_path / "run") if r["mode"] == "train"]
    complete = [r["epoch"] for r in train if not r.get("partial")]
    assert complete == list(range(1, len(complete) + 1)), train
    partial = [r for r in train if r.get("partial")]
    assert len(partial) <= 1 and all(len(complete) <= r["epoch"] < len(complete) + 1 for r in partial), train


def test_a_stop_mid_epoch_is_recorded_as_a_partial_epoch(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, **{"  - {type: train_basic}\n": (
        "  - {type: train_basic}\n  - {type: stop_at_time, seconds: 0}\n")})
    result = dslrun(str(pipeline))
    assert "stopped at step 2 (epoch 0)" in result.stdout and "finished at step" not in result.stdout
    (train,) = [r for r in records(tmp_path / "run") if r["mode"] == "train"]
    assert train["partial"] is True and train["step"] == 2 and train["epoch"] == round(2 / 12, 4)


def test_no_resume_sets_old_checkpoints_aside(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data)
    dslrun(str(pipeline), "--set", "runner.max_epochs=1")
    result = dslrun(str(pipeline), "--set", "runner.max_epochs=1", "--no-resume")
    assert "moved the old checkpoints" in result.stderr
    assert "resumed" not in result.stderr
    assert list((tmp_path / "run").glob("checkpoints.old-*/ckpt-12.index"))


def test_missing_resume_from_is_an_error_not_a_fresh_start(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data)
    result = dslrun(str(pipeline), "--resume-from", str(tmp_path / "nope"), check=False)
    assert result.returncode == 1
    assert "dslrun: error: --resume-from" in result.stderr and "no such checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not list((tmp_path / "run" / "checkpoints").iterdir())


def test_missing_image_names_the_file(tmp_path: Path, data: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "train.csv").write_text((data / "train.csv").read_text().replace("train/", f"{data}/train/")
                                      + "missing/nothere.png,1\n" * 40)
    (broken / "eval.csv").write_text((data / "eval.csv").read_text().replace("eval/", f"{data}/eval/"))
    pipeline = write_pipeline(tmp_path, broken, **{"shuffle_buffer: 256": "shuffle_buffer: 0"})
    result = dslrun(str(pipeline), check=False)
    assert result.returncode == 1
    assert "nothere.png" in result.stderr
    assert "Traceback" not in result.stderr
