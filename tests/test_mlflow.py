"""The `mlflow` callback against a real tracking server (`mlflow server`, SQLite backend) started here.

A sweep of the shipped quickstart pipeline (shrunk with --set) is one parent run with one child
run per trial, each with the resolved pipeline as parameters and artifact and the val
metrics per phase; a trial's run directory trained on continues its MLflow run. The server is
always stopped, whatever the test does.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow", reason='MLflow is an optional extra: pip install "dslrun[mlflow]" (make install does)')

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
SHRINK = ["--set", "runner.max_epochs=2", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
               "--workers", "1"]
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed below, after the server
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        kill_group(process)
        log.close()


def test_a_sweep_is_a_parent_run_of_its_trials_and_a_resumed_trial_continues_its_run(
    tmp_path: Path, server: str
) -> None:
    data = synthetic_data(tmp_path / "data", num_train=64, num_val=32, image_size=16)
    env = {**MULTIRANK_ENV, "DATA_DIR": str(data)}
    file = tmp_path / "tracked.yaml"
    file.write_text(f"""\
extends: {QUICKSTART}
name: tracked
callbacks:
  - type: train_basic
  - type: val_basic
  - type: checkpoint
    save_best: {{monitor: val/accuracy}}
  - type: mlflow
    tracking_uri: {server}
    every_n_iters: 2
sweep:
  metric: val/accuracy
  max_trials: 1
  method: grid
  directory: {tmp_path / 'sweep'}
  parameters:
    modeler.optimizer.learning_rate: {{type: choice, values: [0.05, 0.1]}}
""", encoding="utf-8")
    result = subprocess.run([*DSLRUN, "sweep", str(file), *SHRINK], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=300)
    assert result.returncode == 0, result.stderr

    client = mlflow.tracking.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("tracked")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 1, [r.data.tags for r in runs]
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.metric"] == '"val/accuracy"'
    assert "best/val/accuracy" in parent.data.metrics
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.info.status == "FINISHED"
        assert child.data.params["runner.max_epochs"] == "2" and child.data.params["callbacks.3.type"] == "mlflow"
        history = client.get_metric_history(child.info.run_id, "val/accuracy")
        assert [m.step for m in history] == [4, 8]
        assert client.get_metric_history(child.info.run_id, "train/loss")
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"pipeline.yaml", "best"} <= artifacts, artifacts
    assert float(children[0].data.params["modeler.optimizer.learning_rate"]) in (0.05, 0.1)  # the trial's value

    trial = tmp_path / "sweep" / "trial-0000"
    before = json.loads((trial / "mlflow.json").read_text())
    more = subprocess.run([*DSLRUN, "run", str(trial / "trial.yaml"), "--set", "runner.max_epochs=3"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert more.returncode == 0, more.stderr
    assert json.loads((trial / "mlflow.json").read_text()) == before
    history = client.get_metric_history(before["run_id"], "val/accuracy")
    assert [m.step for m in history] == [4, 8, 12]
    assert len(client.search_runs([experiment.experiment_id])) == 2


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
