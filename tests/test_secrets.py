"""Credentials from the environment are used in full and written nowhere (dsl/language/secrets.py).

A `${NAME}` inside a URI's user information, or of a variable named like a secret, stays a
reference in everything dslrun writes or logs of the pipeline: `dslrun show`, the run's
pipeline.yaml, MLflow's parameters and artifacts. The end-to-end test runs a real MLflow server
and greps the run directory, the console and the server's whole store for the password.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from dsl.language.pipeline import dump_pipeline, load_pipeline

from e2e_support import DSLRUN, ENV, mlflow_server, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
SECRET = "s3cr3t-Pa55-7781"


def pipeline(tmp_path: Path, uri: str, extra: str = "") -> Path:
    file = tmp_path / "tracked.yaml"
    file.write_text(f"extends: {QUICKSTART}\nrunner:\n  model_dir: {tmp_path / 'run'}\ncallbacks: !replace\n  - type: mlflow\n"
                    f"    tracking_uri: {uri}\n{extra}", encoding="utf-8")
    return file


def test_a_password_in_a_uri_is_used_but_written_as_its_reference(tmp_path: Path) -> None:
    file = pipeline(tmp_path, "http://bob:${TRACKER_PW}@tracker.example:5000/${TRACKER_PATH}")
    resolved = load_pipeline(file, environ={"TRACKER_PW": SECRET, "TRACKER_PATH": "team"})
    assert resolved["callbacks"][0]["tracking_uri"] == f"http://bob:{SECRET}@tracker.example:5000/team"  # used in full
    written = dump_pipeline(resolved)
    assert SECRET not in written
    assert "tracking_uri: http://bob:${TRACKER_PW}@tracker.example:5000/team" in written  # the path is no secret


def test_a_variable_named_like_a_secret_is_kept_as_a_reference_anywhere(tmp_path: Path) -> None:
    file = pipeline(tmp_path, "${TRACKER_URI}", "    run_name: ${EXPERIMENT_TOKEN}\n")
    resolved = load_pipeline(file, environ={"TRACKER_URI": "http://tracker.example:5000", "EXPERIMENT_TOKEN": SECRET})
    written = dump_pipeline(resolved)
    assert SECRET not in written and "run_name: ${EXPERIMENT_TOKEN}" in written
    assert "tracking_uri: http://tracker.example:5000" in written  # an address alone is written as it is


def test_a_value_set_on_the_command_line_is_written_as_set(tmp_path: Path) -> None:
    file = pipeline(tmp_path, "http://bob:${TRACKER_PW}@tracker.example:5000")
    resolved = load_pipeline(file, ["callbacks[0].tracking_uri=http://other.example:5000"], environ={"TRACKER_PW": SECRET})
    assert "tracking_uri: http://other.example:5000" in dump_pipeline(resolved)


@pytest.mark.slow
def test_a_run_tracked_with_a_password_leaves_it_nowhere(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    data = synthetic_data(tmp_path / "data", 32, 16, 16)
    # MLflow's basic-auth app checks a slow password hash at each request (0.5 s on a busy machine):
    # the callback's 5 s request limit is raised so that a busy CI machine cannot fail the test.
    env = {**ENV, "MLFLOW_TEST_PASSWORD": SECRET, "MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}
    store = tmp_path / "server"
    store.mkdir()
    # A server that refuses any request without bob's password: every run below that tracks
    # proves the password reached it in full.
    with mlflow_server(store, login=("bob", SECRET)) as (url, _):
        file = pipeline(tmp_path, url.replace("http://", "http://bob:${MLFLOW_TEST_PASSWORD}@"))
        file.write_text(file.read_text() + "  - type: checkpoint\n")  # so that the second run resumes the first
        settings = ["--set", f"inputter.train={data / 'train.csv'}", "--set", f"inputter.val={data / 'eval.csv'}",
                    "--set", "inputter.batch_size=16", "--set", "runner.max_epochs=1"]
        wrong = subprocess.run([*DSLRUN, str(file), *settings], capture_output=True, text=True, timeout=600,
                               env={**env, "MLFLOW_TEST_PASSWORD": "not-the-password"})
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr, wrong.stderr
        assert f"{file}:6:19: error: callbacks[0].tracking_uri: the MLflow tracking server http://bob:***@" in wrong.stderr
        assert "refuses the credentials (the user and password in the URI): 401" in wrong.stderr, wrong.stderr
        assert "not-the-password" not in wrong.stderr and not (tmp_path / "run").exists()  # refused before the run
        from dsl.callbacks._mlflow_check import login_problem

        assert "asks for a login (401): give it MLflow's MLFLOW_TRACKING_USERNAME" in str(login_problem(url, 60, {}))
        assert login_problem(url, 60, {"MLFLOW_TRACKING_USERNAME": "bob", "MLFLOW_TRACKING_PASSWORD": SECRET}) is None
        assert "refuses the credentials (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)" in str(login_problem(
            url.replace("http://", f"http://bob:{SECRET}@"), 60, {"MLFLOW_TRACKING_USERNAME": "bob",
                                                                  "MLFLOW_TRACKING_PASSWORD": "wrong"}))
        runs = [subprocess.run([*DSLRUN, str(file), *settings], capture_output=True, text=True, env=env, timeout=600)]
        # Resumed from the stored pipeline.yaml, which reads the variable again.
        runs.append(subprocess.run([*DSLRUN, str(tmp_path / "run" / "pipeline.yaml"), "--set", "runner.max_epochs=2"],
                                   capture_output=True, text=True, env=env, timeout=600))
        runs.append(subprocess.run([*DSLRUN, "show", str(file), *settings], capture_output=True, text=True, env=env))
    for result in runs:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        assert SECRET not in result.stdout + result.stderr
        assert "View run" not in result.stdout  # MLflow's own link lines (dslrun says where the run is)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [(r["epoch"], r["step"]) for r in records if r["mode"] == "train"]
    assert train[0] == (1, 2) and train[-1] == (2, 4), train  # the second run went on from the first's step 2
    assert "${MLFLOW_TEST_PASSWORD}" in (tmp_path / "run" / "pipeline.yaml").read_text()
    leaks = [path for root in (tmp_path / "run", store) for path in root.rglob("*")
             if path.is_file() and SECRET.encode() in path.read_bytes()]
    assert leaks == []
    assert any(path.name == "pipeline.yaml" for path in store.rglob("*"))  # MLflow's copy was looked at too
    logged = sqlite3.connect(store / "mlflow.db").execute(
        "SELECT run_uuid, step, value FROM metrics WHERE key = 'val/accuracy'").fetchall()
    # Each run's val phase reached the server that asks for the password, once (the second run resumed).
    assert sorted(step for _, step, _ in logged) == [2, 4], logged
