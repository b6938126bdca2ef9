"""A resumed run decides as an uninterrupted one, and a finished run run again does nothing.

In process, on the in-memory `synthetic` inputter (8x8 images, 5 steps an epoch), so each
run takes a second or two: the callbacks' state and the val phases done at a checkpoint's
step are saved beside it (dsl/engine/resume_state.py) and restored on resume.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from dsl.engine.hooks import Callback
from dsl.language.pipeline import load_resolved

pytestmark = pytest.mark.slow

# early_stopping never sees an improvement after the first val (min_delta is huge): it stops
# after epoch 4 whatever the numbers are, so an early or late decision is the state's fault.
PIPELINE = """\
version: 1
name: resume-state
seed: 3
deterministic: true
inputter:
  type: synthetic
  num_examples: {{train: 80, val: 32}}
  image_shape: [8, 8, 3]
  num_classes: 3
  batch_size: 16
network: {{type: mlp, hidden_units: [16]}}
modeler:
  type: image_classification
  optimizer: {{type: sgd, learning_rate: 0.1}}
callbacks:
  - {{type: train_basic}}
  - {{type: val_basic}}
  - {{type: checkpoint, save_best: {{monitor: val/accuracy}}}}
  - {{type: early_stopping, monitor: val/loss, min_delta: 1000, patience: 3}}
  - {{type: train_summary, every_n_iters: 2}}
runner:
  model_dir: {run}
  workflow: [[train, 1], [val, 1]]
  max_epochs: {epochs}
"""


def make_runner(run: Path, epochs: int, extra_callbacks: tuple[Callback, ...] = ()) -> Any:
    from dsl.commands._training import build_runner

    path = run.parent / f"{run.name}.yaml"
    path.write_text(PIPELINE.format(run=run, epochs=epochs))
    runner = build_runner(load_resolved(path))
    for callback in extra_callbacks:
        runner.add_callback(callback)
    return runner


def records(run: Path, mode: str) -> list[tuple[int, int]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [(r["epoch"], r["step"]) for r in map(json.loads, lines) if r["mode"] == mode]


def best_line(output: str) -> str:
    """The run's last best line, its run directory left out: two runs' lines are compared."""
    line = [line for line in output.splitlines() if line.startswith("best val accuracy")][-1]
    return line.split(" (kept in ")[0] + (" (kept)" if " (kept in " in line else "")


def files(run: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    runner = make_runner(run, epochs=8)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runner.run() == 0
    return {"run": run, "step": runner.step, "reason": runner.stop_reason, "best": best_line(out.getvalue())}


def test_the_uninterrupted_reference_stops_early(uninterrupted: dict[str, Any]) -> None:
    assert uninterrupted["step"] == 20  # 4 epochs of 5 steps: best at epoch 1, then 3 without improvement
    assert records(uninterrupted["run"], "val") == [(1, 5), (2, 10), (3, 15), (4, 20)]


def test_raising_max_epochs_continues_with_the_same_patience_and_best(
        tmp_path: Path, uninterrupted: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert make_runner(run, epochs=2).run() == 0
    capsys.readouterr()
    resumed = make_runner(run, epochs=8)
    assert resumed.run() == 0
    out = capsys.readouterr()
    assert "resumed from" in out.err
    assert (resumed.step, resumed.stop_reason) == (uninterrupted["step"], uninterrupted["reason"])
    assert best_line(out.out) == uninterrupted["best"]
    # The records continue: the val phase of epoch 2 ran before the first run ended, not again.
    assert records(run, "val") == [(1, 5), (2, 10), (3, 15), (4, 20)]
    assert records(run, "train") == [(1, 5), (2, 10), (3, 15), (4, 20)]


class SigtermAfterVal(Callback):
    """A SIGTERM that arrives while the val phase of epoch `epoch` runs."""

    def __init__(self, epoch: int) -> None:
        super().__init__({"type": "sigterm"})
        self.epoch = epoch

    def after_val_epoch(self, runner: Any) -> None:
        if runner.epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_during_val_then_rerun_decides_as_the_uninterrupted_run(
        tmp_path: Path, uninterrupted: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert make_runner(run, epochs=8, extra_callbacks=(SigtermAfterVal(2),)).run() == 128 + signal.SIGTERM
    capsys.readouterr()
    resumed = make_runner(run, epochs=8)
    assert resumed.run() == 0
    out = capsys.readouterr()
    assert (resumed.step, resumed.stop_reason) == (uninterrupted["step"], uninterrupted["reason"])
    assert best_line(out.out) == uninterrupted["best"]
    assert records(run, "val") == [(1, 5), (2, 10), (3, 15), (4, 20)]


def test_a_finished_run_run_again_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert make_runner(run, epochs=2).run() == 0
    before = files(run)
    capsys.readouterr()
    again = make_runner(run, epochs=2)
    assert again.run() == 0
    err = capsys.readouterr().err
    assert err == f"dslrun: already finished at step 10 ({run}); raise runner.max_epochs (2) to train further\n"
    assert files(run) == before
    # Lowered below the run's length: finished too, and said so.
    assert make_runner(run, epochs=1).run() == 0
    assert "it is at epoch 2, beyond runner.max_epochs 1" in capsys.readouterr().err
    assert files(run) == before


def test_an_early_stopped_run_run_again_stays_stopped(uninterrupted: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    run = uninterrupted["run"]
    before = files(run)
    assert make_runner(run, epochs=8).run() == 0
    err = capsys.readouterr().err
    assert f"already finished at step 20 ({run}): early stopping: val/loss did not improve" in err
    assert "raise early_stopping.patience to train further" in err
    assert files(run) == before


def test_checkpoints_without_a_state_file_still_resume(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Checkpoints written before state files: they load; the DONE marker says the last one is finished."""
    run = tmp_path / "run"
    assert make_runner(run, epochs=2).run() == 0
    for state in (run / "checkpoints").glob("*.state.json"):
        state.unlink()
    capsys.readouterr()
    assert make_runner(run, epochs=2).run() == 0
    assert "already finished at step 10" in capsys.readouterr().err
    resumed = make_runner(run, epochs=3)
    assert resumed.run() == 0 and resumed.step == 15
    assert records(run, "val") == [(1, 5), (2, 10), (3, 15)]


def test_state_files_follow_their_checkpoints(tmp_path: Path) -> None:
    from dsl.engine.resume_state import read_state, state_path, sweep_states, write_state

    directory = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        write_state(directory / f"ckpt-{step}", {"step": step, "callbacks": {}})
    sweep_states(directory, [str(directory / "ckpt-2"), str(directory / "ckpt-3")])
    assert sorted(p.name for p in directory.iterdir()) == ["ckpt-2.state.json", "ckpt-3.state.json"]
    assert read_state(directory / "ckpt-2", 2) == {"step": 2, "callbacks": {}}
    assert read_state(directory / "ckpt-2", 7) is None  # a stale file is not used
    state_path(directory / "ckpt-3").write_text("{torn")
    assert read_state(directory / "ckpt-3", 3) is None
