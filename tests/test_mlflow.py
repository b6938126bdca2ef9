"""The `mlflow` callback: what validate says without MLflow, and a tracking server that does
not answer (before the run: an error at once; during it: training goes on).

The callback against a real tracking server (a sweep as the parent run of its trials, a
resumed trial continuing its run) is tested with the sweep it tracks, in
tests/test_sweep_e2e.py, so that one trained study serves both (test time).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_support import DSLRUN, ENV, MULTIRANK_ENV, dslrun, free_port, kill_group, mlflow_server, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"


def test_validate_names_the_extra_when_mlflow_is_missing(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(f"extends: {QUICKSTART}\ncallbacks: !replace\n  - type: mlflow\n", encoding="utf-8")
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


def test_a_folder_store_this_mlflow_refuses_is_a_validate_error(tmp_path: Path) -> None:
    """MLflow 3.13 raises when its client is made on a folder (`file:` or a path), unless
    MLFLOW_ALLOW_FILE_STORE=true: the run began with a traceback. Now validate says so, located,
    with a database URI to use instead."""
    from dsl.callbacks._mlflow_check import FOLDER_STORE_REFUSED, _mlflow_version

    if _mlflow_version() < FOLDER_STORE_REFUSED:
        pytest.skip(f"the installed MLflow ({_mlflow_version()}) still writes to folders")
    for uri in (f"file://{tmp_path}/mlruns", "mlruns"):
        file = tracked_pipeline(tmp_path, uri)
        result = dslrun("validate", str(file), check=False, env={**ENV, "MLFLOW_ALLOW_FILE_STORE": ""})
        assert result.returncode == 1, result.stdout
        folder = Path(uri.removeprefix("file://")).absolute()
        assert result.stdout.splitlines()[0] == (
            f"{file}:6:19: error: callbacks[0].tracking_uri: MLflow {'.'.join(map(str, _mlflow_version()))} no longer "
            f"writes to a folder ({uri}); use a database, e.g. tracking_uri: sqlite:///{folder.with_suffix('.db')}, or "
            "a tracking server, or set MLFLOW_ALLOW_FILE_STORE=true to keep the folder")
        assert dslrun("validate", str(file), env={**ENV, "MLFLOW_ALLOW_FILE_STORE": "true"}).returncode == 0
        ran = dslrun("run", str(file), check=False, env={**ENV, "MLFLOW_ALLOW_FILE_STORE": ""})
        assert ran.returncode == 1 and "Traceback" not in ran.stderr and "no longer writes to a folder" in ran.stderr
        assert not (tmp_path / "run").exists()
    assert dslrun("validate", str(tracked_pipeline(tmp_path, f"sqlite:///{tmp_path}/mlflow.db"))).returncode == 0


def tracked_pipeline(tmp_path: Path, uri: str) -> Path:
    file = tmp_path / "tracked.yaml"
    file.write_text(f"extends: {QUICKSTART}\nrunner:\n  model_dir: {tmp_path / 'run'}\ncallbacks: !replace\n  - type: mlflow\n"
                    f"    tracking_uri: {uri}\n", encoding="utf-8")
    return file


def test_a_tracking_server_that_does_not_answer_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    """Refused, or accepted and never answered (MLflow's client would retry for minutes): one
    located line naming the callback and the server, exit 1, nothing built, no run directory."""
    pytest.importorskip("mlflow")
    with socket.socket() as silent:  # a real listening socket whose server never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        for port, reason in ((free_port(), "Connection refused"), (silent.getsockname()[1], "no answer within 5 s")):
            file = tracked_pipeline(tmp_path, f"http://bob:hunter2@127.0.0.1:{port}")
            result = dslrun("run", str(file), check=False, timeout=120)
            assert result.returncode == 1, result.stderr
            assert [line for line in result.stderr.splitlines() if "error" in line] == [
                f"{file}:6:19: error: callbacks[0].tracking_uri: the MLflow tracking server "
                f"http://bob:***@127.0.0.1:{port} does not answer: {reason}; start it or correct the URI (dslrun asks "
                "before training, so that a run never waits on it)"]
            assert "Traceback" not in result.stderr and "hunter2" not in result.stderr + result.stdout
            assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_tracking_server_that_stops_answering_never_stops_training(tmp_path: Path) -> None:
    """The server freezes (SIGSTOP: connections wait, nothing answers) once the run has started:
    the run says so once, trains to its end, and keeps every value in metrics.jsonl. It waits
    `end_wait_seconds` at its end, says what it could not send, and keeps those phase values and
    its end in mlflow.json; once the server answers again, the same command run again sends them
    and ends the MLflow run; continued to a 4th epoch, MLflow then holds every phase once."""
    pytest.importorskip("mlflow")
    data = synthetic_data(tmp_path / "data", 64, 16, 32)
    with mlflow_server(tmp_path) as (url, server):
        # A password in the URI (this server asks for none): mlflow.json keeps it as ***, and what
        # the record kept is sent with the pipeline's own URI.
        with_password = url.replace("http://", "http://bob:hunter2@")
        file = tmp_path / "tracked.yaml"  # with checkpoints, so that the run can be continued
        file.write_text(f"extends: {QUICKSTART}\nrunner:\n  model_dir: {tmp_path / 'run'}\ncallbacks:\n"
                        f"  - type: checkpoint\n  - type: mlflow\n    tracking_uri: {with_password}\n", encoding="utf-8")
        settings = ["--set", f"inputter.train={data / 'train.csv'}", "--set", f"inputter.val={data / 'eval.csv'}",
                    "--set", "inputter.batch_size=16", "--set", "runner.max_epochs=3",
                    "--set", "callbacks[1].every_n_iters=1", "--set", "callbacks[1].end_wait_seconds=1"]
        # Each request to the frozen server waits out its timeout: 1 s here (the user's knob), 5 by default.
        frozen_env = {**ENV, "MLFLOW_HTTP_REQUEST_TIMEOUT": "1"}
        process = subprocess.Popen([*DSLRUN, "run", str(file), *settings], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=frozen_env, start_new_session=True)
        try:
            assert process.stderr is not None
            lines = []
            for line in process.stderr:  # the run exists in MLflow: freeze the server before the first step ends
                lines.append(line)
                if "mlflow: run " in line:
                    os.killpg(server.pid, signal.SIGSTOP)
                    break
            _, rest = process.communicate(timeout=600)
        finally:
            kill_group(process)
        stderr = "".join(lines) + rest
        assert process.returncode == 0, stderr
        warnings = [line for line in stderr.splitlines() if "warning: mlflow" in line]
        assert len(warnings) == 2 and url.replace("http://", "http://bob:***@") in warnings[0], stderr
        assert "training goes on" in warnings[0] and "hunter2" not in stderr, stderr
        assert "(log-batch: " in warnings[0] or "(create-run: " in warnings[0], warnings[0]  # the cause, not 300 characters of URL
        kept = json.loads((tmp_path / "run" / "mlflow.json").read_text())["unsent"]
        # Every phase came after the freeze: 3 train and 3 val phases.
        assert len(kept) == 6 and f"{len(kept)} phase value(s)" in warnings[1] and "RUNNING" in warnings[1], warnings
        records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in records if r["mode"] == "train"] == [1, 2, 3]

        os.killpg(server.pid, signal.SIGCONT)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=url)
        run_id = json.loads((tmp_path / "run" / "mlflow.json").read_text())["run_id"]
        # The same command again, the run finished: what the record kept is sent, and the run ends.
        again = dslrun("run", str(file), *settings, timeout=600)
        assert (f"dslrun: mlflow: sent the {len(kept)} phase value(s) and the run's end (FINISHED) that mlflow.json "
                "kept from an outage") in again.stderr, again.stderr
        assert client.get_run(run_id).info.status == "FINISHED"
        record = json.loads((tmp_path / "run" / "mlflow.json").read_text())
        assert "unsent" not in record and "end" not in record, record
        more = dslrun("run", str(file), *settings[:-2], "--set", "runner.max_epochs=4", timeout=600)
        assert "resumed from" in more.stderr and "phase value(s)" not in more.stderr, more.stderr  # nothing left to send
        per_epoch = records[0]["step"]
        for key in ("val/accuracy", "train_epoch/loss"):  # each phase once: the 3 kept, then the 4th epoch's
            history = client.get_metric_history(run_id, key)
            assert sorted(metric.step for metric in history) == [per_epoch * epoch for epoch in (1, 2, 3, 4)], (key, history)
        assert client.get_run(run_id).info.status == "FINISHED"
