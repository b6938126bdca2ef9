"""`dslrun sweep` end to end: real trials of the shipped quickstart pipeline on tiny generated data.

The sweep file extends pipelines/quickstart.yaml; `--set` on the sweep's command line shrinks
every trial (two short epochs of 16x16 images). One sweep is interrupted as Ctrl-C would (SIGINT
to the sweep) and resumed; one has trials that hang past their timeout; one runs 2-rank Horovod
trials. After each, no process of any trial may be left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
SHRINK = ["--set", "runner.max_epochs=2", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    data = synthetic_data(tmp_path_factory.mktemp("sweepdata"), num_train=64, num_val=32, image_size=16)
    return {**MULTIRANK_ENV, "DATA_DIR": str(data)}


def sweep_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tune.yaml"
    path.write_text(f"extends: {QUICKSTART}\nname: tune\nsweep:\n  directory: {tmp_path / 'sweep'}\n{body}", encoding="utf-8")
    return path


def sweep(env: dict[str, str], *args: str, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSLRUN, "sweep", *args, *SHRINK], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=args[0].rsplit("/", 1)[0])


def leftovers(marker: Path) -> list[str]:
    """Command lines of live processes that name `marker` (a sweep directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(marker) in command and state != "Z":
                found.append(command)
    return found


def status(env: dict[str, str], file: Path) -> list[list[str]]:
    result = sweep(env, str(file), "--status")
    assert result.returncode == 0, result.stderr
    return [line.split() for line in result.stdout.splitlines()]


def interrupt_when_training(file: Path, env: dict[str, str], trial: int) -> str:
    """Start the sweep, SIGINT it (as Ctrl-C does) once `trial` has checkpointed; its whole output."""
    directory = file.parent / "sweep"
    process = subprocess.Popen([*DSLRUN, "sweep", str(file), *SHRINK], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=file.parent, start_new_session=True)
    try:
        lines = []
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if f"trial {trial} started" in line:
                break
        deadline = time.monotonic() + 180  # its first checkpoint written (epoch 1): the re-run resumes from there
        while not (directory / f"trial-{trial:04d}" / "checkpoints" / "checkpoint").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        kill_group(process)
    assert process.returncode == 130, "".join(lines) + rest
    return "".join(lines) + rest


def test_a_sweep_interrupted_by_ctrl_c_stops_its_trials_and_resumes(tmp_path: Path, env: dict[str, str]) -> None:
    file = sweep_file(tmp_path, """\
  metric: val/accuracy
  max_trials: 1
  method: random
  seed: 0
  early_stopping: {type: asha, reduction_factor: 2}
  parameters:
    modeler.optimizer.learning_rate: {type: log_uniform, low: 0.01, high: 0.5}
""")
    directory = tmp_path / "sweep"
    output = interrupt_when_training(file, env, trial=0)
    assert "interrupted: the trials were stopped" in output
    assert leftovers(directory) == []
    rows = status(env, file)
    assert rows[1][:2] == ["0", "interrupted"] and rows[2] == ["no", "trial", "has", "finished", "yet"], rows

    resumed = sweep(env, str(file))
    assert resumed.returncode == 0, resumed.stderr
    assert "trial 0 was interrupted: it runs again (resuming" in resumed.stderr
    assert leftovers(directory) == []
    table = status(env, file)
    assert [row[:2] for row in table[1:3]] == [["0", "interrupted"], ["1", "complete"]], table  # 0 re-run as 1
    log = (directory / "trial-0000" / "trial.log").read_text()
    assert log.count("\n$ ") + log.startswith("$ ") == 2 and "resumed from " in log[log.rindex("\n$ "):]
    assert not (directory / "trial-0001").exists()  # the re-run went on in trial 0's directory, from its checkpoint
    best = directory / "best.yaml"
    assert best.is_file() and (directory / "optimization_history.png").stat().st_size > 1000
    checked = subprocess.run([*DSLRUN, "validate", str(best)], capture_output=True, text=True, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "sweep:" not in best.read_text() and "model_dir: runs/tune-best" in best.read_text()


def test_trials_that_hang_past_their_timeout_fail_with_the_reason_until_max_failed_trials(
    tmp_path: Path, env: dict[str, str]
) -> None:
    file = sweep_file(tmp_path, """\
  max_trials: 4
  max_failed_trials: 2
  trial_timeout_seconds: 2
  parameters:
    modeler.optimizer.learning_rate: {type: uniform, low: 0.01, high: 0.1}
""")
    result = sweep(env, str(file))
    assert result.returncode == 1, result.stderr
    assert "stopping: 2 trials failed (sweep.max_failed_trials 2)" in result.stderr
    assert result.stderr.count("failed: hung: still running after 2 s (sweep.trial_timeout_seconds); stopped") == 2
    assert "Traceback" not in result.stderr
    assert leftovers(tmp_path / "sweep") == []


@pytest.mark.multiprocess
def test_a_sweep_of_two_rank_horovod_trials_stops_every_rank_on_ctrl_c_and_resumes(tmp_path: Path, env: dict[str, str]) -> None:
    file = sweep_file(tmp_path, """\
  metric: val/loss
  max_trials: 1
  ranks_per_trial: 2
  slots: 2
  early_stopping: {type: median}
  parameters:
    modeler.optimizer.learning_rate: {type: choice, values: [0.05, 0.2]}
""")
    directory = tmp_path / "sweep"
    output = interrupt_when_training(file, env, trial=0)
    assert "interrupted: the trials were stopped" in output
    assert leftovers(directory) == []  # horovodrun and both ranks
    log = (directory / "trial-0000" / "trial.log").read_text()
    assert log.startswith("$ ") and "horovodrun -np 2 " in log.splitlines()[0]
    resumed = sweep(env, str(file))
    assert resumed.returncode == 0, resumed.stderr
    assert leftovers(directory) == []
    assert [row[1] for row in status(env, file)[1:3]] == ["interrupted", "complete"]
    log = (directory / "trial-0000" / "trial.log").read_text()
    second = log[log.rindex("\n$ "):]
    assert log.count("\n$ ") + log.startswith("$ ") == 2 and "resumed from " in second  # from trial 0's checkpoint
