"""`dslrun sweep` end to end: real trials of the shipped quickstart pipeline on tiny generated data.

The sweep file extends pipelines/quickstart.yaml; `--set` on the sweep's command line shrinks
every trial (two short epochs of 16x16 images). One study is shared by several tests (test
time): a sweep of 2-rank Horovod trials (`horovodrun -np 2`), interrupted as Ctrl-C would
(SIGINT to the sweep) and resumed, with the `mlflow` callback logging to a real tracking server
(`mlflow server`, SQLite backend) the module starts when MLflow is installed. Other sweeps have
one-process trials that hang past their timeout, and trials started by `dslrun launch`
(collective, ps). After each, no process of any trial may be left.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group, synthetic_data
from e2e_support import mlflow_server as start_mlflow_server

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
# Every trial shrunk, its network a small CNN: what is tested is the sweep's handling of its trials,
# and every rank of every trial builds and traces the network (ResNet-20, traced by the shared study's
# two ranks twice, made its fixture the slowest setup of the suite).
SHRINK = ["--set", "runner.max_epochs=2", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]",
          "--set", "network={type: simple_cnn, filters: [8, 16], dense_units: 32}"]


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
    # SIGINT at its default in the sweep: a pytest started in the background by a shell without job control
    # (CI's scripts) ignores it, and so would the sweep, which inherits it.
    process = subprocess.Popen([*DSLRUN, "sweep", str(file), *SHRINK], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=file.parent, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A real tracking server (SQLite backend) when MLflow is installed, else None (its test skips)."""
    if importlib.util.find_spec("mlflow") is None:
        yield None
        return
    with start_mlflow_server(tmp_path_factory.mktemp("mlflow")) as (url, _):
        yield url


@dataclass
class Study:
    """The shared sweep of 2-rank Horovod trials: interrupted in its only trial, then resumed to its end."""

    file: Path
    directory: Path
    interrupted: str  # the interrupted sweep's output
    left_after_interrupt: list[str]
    status_after_interrupt: list[list[str]]
    vals_after_interrupt: list[float]  # the interrupted trial's val accuracies, as it left them
    resumed: subprocess.CompletedProcess[str]
    left_after_resume: list[str]
    tracking: str | None  # the MLflow server's URL


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str], mlflow_server: str | None) -> Study:
    tmp_path = tmp_path_factory.mktemp("resumed")
    tracking = "" if mlflow_server is None else f"""\
  - type: mlflow
    tracking_uri: {mlflow_server}
    every_n_iters: 2
"""
    file = sweep_file(tmp_path, """\
  metric: val/accuracy
  max_trials: 1
  method: random
  seed: 0
  ranks_per_trial: 2
  slots: 2
  early_stopping: {type: asha, reduction_factor: 2}
  parameters:
    modeler.optimizer.learning_rate: {type: log_uniform, low: 0.01, high: 0.5}
callbacks:
  - type: train_basic
  - type: val_basic
  - type: checkpoint
    every_n_epochs: 1
    save_best: {monitor: val/accuracy}
""" + tracking)
    directory = tmp_path / "sweep"
    output = interrupt_when_training(file, env, trial=0)
    left = leftovers(directory)
    records = directory / "trial-0000" / "metrics.jsonl"
    vals = [json.loads(line)["accuracy"] for line in (records.read_text().splitlines() if records.exists() else [])
            if line.strip() and json.loads(line)["mode"] == "val"]
    rows = status(env, file)
    resumed = sweep(env, str(file))
    return Study(file, directory, output, left, rows, vals, resumed, leftovers(directory), mlflow_server)


@pytest.mark.multiprocess
def test_ctrl_c_stops_every_rank_of_the_sweep_s_trials_and_status_shows_them_interrupted(study: Study) -> None:
    assert "interrupted: the trials were stopped" in study.interrupted
    assert study.left_after_interrupt == []  # horovodrun and both ranks
    log = (study.directory / "trial-0000" / "trial.log").read_text()
    assert log.startswith("$ ") and "horovodrun -np 2 " in log.splitlines()[0]
    rows = study.status_after_interrupt
    assert rows[1][:2] == ["0", "interrupted"] and rows[2] == ["no", "trial", "has", "finished", "yet"], rows
    # A val phase it ended before the Ctrl-C (when the interrupt came after one: timing decides) is
    # its row's value; the row showed the value of a phase before (a trial saw 0 for 0.0598).
    vals = study.vals_after_interrupt
    if vals:
        assert rows[1][2] == f"{vals[-1]:.4g}", (rows, vals)


@pytest.mark.multiprocess
def test_re_running_the_sweep_resumes_the_interrupted_trial_from_its_checkpoint(study: Study) -> None:
    assert study.resumed.returncode == 0, study.resumed.stderr
    assert "trial 0 was interrupted: it runs again (resuming" in study.resumed.stderr
    assert study.left_after_resume == []
    table = [line.split() for line in study.resumed.stderr.splitlines()]  # the report the sweep ends with
    start = table.index(["trial", "state", "val/accuracy", "seconds", "modeler.optimizer.learning_rate", "reason"])
    # The re-run continues trial 0 under its number (issue 41: it came back as trial 1, and 0 stayed
    # "interrupted"); Optuna's own record of the interrupted attempt is not a row of its own.
    assert [row[:2] for row in table[start + 1:start + 3]] == [["0", "complete"], ["re-runs", "of"]], table
    # The number Optuna gave the re-run is missing from the table: the line under it says which it is.
    assert " ".join(table[start + 2]) == ("re-runs of interrupted trials, shown under the trial they continue: 1 (of "
                                          "trial 0); the plots number them as Optuna does"), table
    log = (study.directory / "trial-0000" / "trial.log").read_text()
    assert log.count("\n$ ") + log.startswith("$ ") == 2 and "resumed from " in log[log.rindex("\n$ "):]
    assert not (study.directory / "trial-0001").exists()  # the re-run went on in trial 0's directory, from its checkpoint


@pytest.mark.multiprocess
def test_the_sweep_writes_the_best_pipeline_and_plots(study: Study, env: dict[str, str]) -> None:
    best = study.directory / "best.yaml"
    assert best.is_file() and (study.directory / "optimization_history.png").stat().st_size > 1000
    checked = subprocess.run([*DSLRUN, "validate", str(best)], capture_output=True, text=True, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "sweep:" not in best.read_text() and f"model_dir: {study.directory / 'best-run'}" in best.read_text()
    # Tuned on 2 ranks a trial: the header says to train it so (it said `dslrun best.yaml`, one process).
    header = best.read_text().splitlines()[1]
    assert "Train it as its trials ran: horovodrun -np 2 " in header and header.endswith(f"dslrun run {best}"), header


@pytest.mark.multiprocess
def test_the_sweep_is_a_parent_mlflow_run_and_the_resumed_trial_continues_its_child_run(study: Study) -> None:
    if study.tracking is None:
        pytest.skip('MLflow is an optional extra: pip install "dslrun[mlflow]" (make install does)')
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=study.tracking)
    experiment = client.get_experiment_by_name("tune")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 1, [r.data.tags for r in runs]  # the re-run is no second child
    parent, child = parents[0], children[0]
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.metric"] == '"val/accuracy"'
    assert "best/val/accuracy" in parent.data.metrics
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.info.status == "FINISHED"
    assert child.data.params["runner.max_epochs"] == "2" and child.data.params["callbacks.3.type"] == "mlflow"
    assert 0.01 <= float(child.data.params["modeler.optimizer.learning_rate"]) <= 0.5  # the trial's value
    trial = study.directory / "trial-0000"
    assert json.loads((trial / "mlflow.json").read_text())["run_id"] == child.info.run_id
    steps = [m.step for m in client.get_metric_history(child.info.run_id, "val/accuracy")]
    assert steps[-1] == 8 and set(steps) <= {4, 8}, steps  # epoch 2's val phase logged by the resumed run
    # Step values every 2 steps under train/loss, the train phase's means apart: no zig-zag of two kinds.
    assert {m.step for m in client.get_metric_history(child.info.run_id, "train/loss")} == {2, 4, 6, 8}
    assert {m.step for m in client.get_metric_history(child.info.run_id, "train_epoch/loss")} <= {4, 8}
    artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
    assert {"pipeline.yaml", "best"} <= artifacts, artifacts


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
@pytest.mark.parametrize(("backend", "ranks", "command", "tasks"), [
    ("collective", 2, "-m dsl launch --backend collective --workers 2 ", ["[chief]", "[worker:0]"]),
    ("ps", 1, "-m dsl launch --backend ps --workers 1 --ps 1 ", ["[chief]", "[worker:0]", "[ps:0]"]),
])
def test_a_trial_of_a_cluster_backend_is_a_cluster_that_dslrun_launch_starts(
    tmp_path: Path, env: dict[str, str], backend: str, ranks: int, command: str, tasks: list[str]
) -> None:
    file = sweep_file(tmp_path, f"""\
  metric: val/accuracy
  max_trials: 1
  ranks_per_trial: {ranks}
  slots: 4
  parameters:
    modeler.optimizer.learning_rate: {{type: choice, values: [0.05, 0.1]}}
""")
    result = sweep(env, str(file), "--set", f"runner.backend={backend}")
    assert result.returncode == 0, result.stderr
    assert "trial 0 finished: val/accuracy " in result.stderr, result.stderr
    log = (tmp_path / "sweep" / "trial-0000" / "trial.log").read_text()
    assert command in log.splitlines()[0], log.splitlines()[0]
    assert all(task in log for task in tasks), log[-3000:]  # every task of the cluster ran (and printed)
    assert leftovers(tmp_path / "sweep") == []
