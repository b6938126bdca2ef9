"""`mlflow`: the run in an MLflow tracking server (or a local database): parameters, metrics, artifacts.

Rank 0 logs, once per run directory: the MLflow run's id is kept in `<model_dir>/mlflow.json`,
so a resumed run continues the same MLflow run instead of starting a second one. The resolved
pipeline is logged as parameters (flattened dotted keys, as `--set` writes them) and as the
artifact `pipeline.yaml`; the train outputs every `every_n_iters` steps (`train/loss`) and every
phase's outputs at its end (`val/accuracy`, and a train phase's means as `train_epoch/loss`); `best/` (checkpoint.save_best)
and the last checkpoint's state file at the end. A trial of `dslrun sweep` is a child run of
the sweep's run (`DSLRUN_MLFLOW_PARENT_RUN_ID`, set by the sweep).

MLflow is an optional extra (`pip install "dslrun[mlflow]"`); `dslrun validate` says so when a
pipeline uses this callback without it. The client is used directly (MlflowClient), never the
fluent API's process-wide active run.

Tracking never stops nor stalls training. `dslrun run` asks the server before anything is built
(dsl/callbacks/_mlflow_check.py): one that does not answer is an error located at the callback.
During the run each request waits a few seconds at most (MLFLOW_HTTP_REQUEST_TIMEOUT and
_MAX_RETRIES, unless set); when the server stops answering the run says so once and goes on,
the step values are skipped, the phase values are kept and sent again at the next phase end,
and every value stays in metrics.jsonl. At the run's end it keeps asking for `end_wait_seconds`;
the phase values still unsent are then kept in mlflow.json (so is a phase value of a run killed
during an outage) and sent when the run directory's run starts again, resumed or continued.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsl.callbacks._mlflow_check import check_mlflow_installed, check_tracking_server
from dsl.callbacks._mlflow_check import shown_uri as shown_uri  # the server without its password, for the sweep too
from dsl.engine.hooks import Callback
from dsl.engine.rundir import is_number
from dsl.language.registry import register

PARENT_ENV = "DSLRUN_MLFLOW_PARENT_RUN_ID"
_MAX_VALUE = 500  # MLflow refuses longer parameter values on some stores
# How long one request to the server may take during a run (MLflow's own default retries for minutes).
REQUEST_LIMITS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
# MLflow prints "🏃 View run ... at: ..." on stdout when a run ends: dslrun says where the run is
# itself (`mlflow: run <id> at <uri>`), and stdout is the sweep's table and eval's JSON.
QUIET = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


@register(
    "callback",
    "mlflow",
    params={
        "tracking_uri": {
            "description": (
                "Where runs are recorded: a server (http://host:5000) or a database (sqlite:///mlflow.db); a local "
                "folder only with MLflow before 3.13 or MLFLOW_ALLOW_FILE_STORE=true; null: MLflow's own default "
                "(MLFLOW_TRACKING_URI, else its local store)."
            ),
            "type": ["string", "null"],
            "default": None,
        },
        "experiment": {
            "description": "The MLflow experiment; null: the pipeline's name.",
            "type": ["string", "null"],
            "default": None,
        },
        "run_name": {
            "description": "The run's name; null: the run directory's name.",
            "type": ["string", "null"],
            "default": None,
        },
        "every_n_iters": {
            "description": "Log the train outputs every N train steps (phase outputs are logged at each phase's end).",
            "type": "integer",
            "minimum": 1,
            "default": 10,
        },
        "end_wait_seconds": {
            "description": (
                "At the run's end, how long to keep asking a server that stopped answering, to send the phase values, "
                "best model and end it holds (what is still unsent then is kept in mlflow.json for the run's next start)."
            ),
            "type": "number",
            "minimum": 0,
            "default": 20,
        },
    },
    unique=True,
    checks=[check_mlflow_installed],
    start_checks=[check_tracking_server],
)
class MlflowTracking(Callback):
    """Track the run in MLflow (rank 0): the resolved pipeline as parameters and artifact, metrics per logging step and per
    phase, the best model as artifacts; a resumed run continues its MLflow run. Needs pip install "dslrun[mlflow]".
    """
    priority = "LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self.client = bounded_client(self.params.get("tracking_uri"))
        self.record = Path(runner.model_dir) / "mlflow.json"
        self.down = False  # the server stopped answering; retried at phase ends
        self.unsent: list[tuple[dict[str, Any], int]] = []  # phase values it has not taken yet
        self.kept = 0  # how many of them mlflow.json holds
        self.end: str | None = None  # the run's end, kept in mlflow.json when the server did not take it
        self.run_id: str | None = None
        self.stored: dict[str, Any] = {}  # what the record (mlflow.json) holds: the server and the run's id
        self.sent_step = -1  # the last step whose train values MLflow took (kept in the record)
        started, run_id = self._tracked(runner, self._start, runner)
        if started:
            self.run_id = run_id
            runner.notice(f"mlflow: run {self.run_id} at {shown_uri(self.client.tracking_uri)}")
            if self.unsent:  # phase values an earlier start could not send
                held = len(self.unsent)
                self._send_phases(runner)
                if not self.unsent:
                    runner.notice(f"mlflow: sent the {held} phase value(s) the run's last start kept in mlflow.json")

    def _start(self, runner: Any) -> str:
        return self._resumed_run(runner) or self._new_run(runner)

    def _tracked(self, runner: Any, request: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """(True, `request(*args)`), or (False, None) when the server fails it: said once, and
        training goes on."""
        try:
            result = request(*args)
        except Exception as exc:  # MLflow's and requests' errors alike: tracking must not end the run
            if not self.down:
                runner.notice(f"warning: mlflow: {shown_uri(self.client.tracking_uri)} failed a request ({failure(exc)}); "
                              "training goes on, tracking is retried at each phase end, and metrics.jsonl keeps "
                              "every value")
            self.down = True
            return False, None
        if self.down:
            runner.notice(f"mlflow: {shown_uri(self.client.tracking_uri)} answers again; tracking goes on "
                          "(the step values in between are in metrics.jsonl)")
            self.down = False
        return True, result

    def _resumed_run(self, runner: Any) -> str | None:
        try:
            stored = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not same_server(stored.get("tracking_uri"), self.client):
            return None
        self.client.update_run(stored["run_id"], status="RUNNING")
        self.stored = {"tracking_uri": stored["tracking_uri"], "run_id": stored["run_id"]}
        # A run resumed from the checkpoint the user named (--resume-from) may take another path: sent again.
        self.sent_step = int(stored.get("sent_step", -1)) if runner.resume_from is None else -1
        self.unsent = [(dict(values), int(step)) for values, step in stored.get("unsent", [])]
        self.kept = len(self.unsent)
        return str(stored["run_id"])

    def _new_run(self, runner: Any) -> str:
        from dsl.language.pipeline import dump_pipeline

        name = self.params.get("experiment") or runner.pipeline.name
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        tags = {"dslrun.model_dir": str(Path(runner.model_dir).resolve())}  # a relative one means nothing in MLflow
        if os.environ.get(PARENT_ENV):
            tags["mlflow.parentRunId"] = os.environ[PARENT_ENV]
        run = self.client.create_run(experiment_id, run_name=self.params.get("run_name") or Path(runner.model_dir).name,
                                     tags=tags)
        run_id = run.info.run_id
        tree = runner.pipeline.to_dict()
        self._log_params(run_id, tree)
        self.client.log_text(run_id, dump_pipeline(tree), "pipeline.yaml")
        from dsl.engine.rundir import atomic_write_text

        # The server without its password (a run directory is read by the whole team); a new password still
        # continues the same MLflow run.
        self.stored = {"tracking_uri": shown_uri(self.client.tracking_uri), "run_id": run_id}
        atomic_write_text(self.record, json.dumps(self.stored) + "\n")
        return str(run_id)

    def _log_params(self, run_id: str, pipeline: dict[str, Any]) -> None:
        from mlflow.entities import Param

        from dsl.language.secrets import redacted

        params = [Param(key, value[:_MAX_VALUE]) for key, value in flatten(redacted(pipeline)).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(run_id, params=params[start:start + 100])

    def _log_metrics(self, run_id: str, values: dict[str, Any], step: int) -> None:
        log_values(self.client, run_id, values, step)

    def after_train_iter(self, runner: Any) -> None:
        if self.run_id is None or self.down:
            return  # skipped while the server does not answer: a step value is one of many
        if runner.step % int(self.params.get("every_n_iters", 10)) == 0 and runner.step > self.sent_step:
            values = {f"train/{k}": v for k, v in runner.outputs.items()}
            if self._tracked(runner, self._log_metrics, self.run_id, values, runner.step)[0]:
                self._note_sent(runner.step)

    def _note_sent(self, step: int) -> None:
        """Keep the last step whose values MLflow took in the run's record: a run killed after
        its last checkpoint trains those steps again when resumed, and MLflow would draw each
        of them twice (it keeps every value logged at a step)."""
        self.sent_step = step
        self._write_record()

    def _write_record(self) -> None:
        """mlflow.json: the server, the run's id, the last train step sent, the phase values unsent."""
        from dsl.engine.rundir import atomic_write_text

        record: dict[str, Any] = {**self.stored, "sent_step": self.sent_step}
        if self.unsent:
            record["unsent"] = [[values, step] for values, step in self.unsent]
        if self.end is not None:
            record["end"] = self.end
        atomic_write_text(self.record, json.dumps(record) + "\n")
        self.kept = len(self.unsent)

    def after_epoch(self, runner: Any) -> None:
        if runner.phase_recorded_before:
            return  # sent before the run was interrupted: the resumed run ran it again, to the same values
        # A train phase's means go under train_epoch/: under train/ they would interleave with the
        # step values of the same name, one curve zig-zagging between two kinds of value.
        phase = "train_epoch" if runner.mode == "train" else runner.mode
        self.unsent.append(({f"{phase}/{k}": v for k, v in runner.phase_outputs.items()}, runner.step))
        self._send_phases(runner)

    def _send_phases(self, runner: Any) -> None:
        """The phase values not sent yet, oldest first, until the server fails one (kept for the next)."""
        if self.run_id is None:
            return
        while self.unsent:
            values, step = self.unsent[0]
            if not self._tracked(runner, self._log_metrics, self.run_id, values, step)[0]:
                break
            self.unsent.pop(0)
        if self.unsent or self.kept:  # kept for a killed run's next start; once sent, taken out of the record
            self._write_record()

    def after_run(self, runner: Any) -> None:
        if self.run_id is None:
            return
        self._send_phases(runner)
        deadline = time.monotonic() + float(self.params.get("end_wait_seconds", 20))
        while self.down and time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            self._send_phases(runner)
            if not self.unsent:  # the queue may have been empty: ask the server anyway
                self._tracked(runner, self.client.get_run, self.run_id)
        if self.down:
            self.end = "FAILED" if runner.failed else "FINISHED"
            self._write_record()
            runner.notice(f"warning: mlflow: {shown_uri(self.client.tracking_uri)} still does not answer: "
                          f"{len(self.unsent)} phase value(s), the best model and the run's end are not sent (the "
                          f"MLflow run shows RUNNING); mlflow.json keeps them: the same command run again sends "
                          "them once the server answers, and metrics.jsonl has every value")
            return
        self._tracked(runner, log_best, self.client, self.run_id, Path(runner.model_dir))
        if shown_uri(self.client.tracking_uri) != self.client.tracking_uri:
            # MLflow prints the run's address, password and all, when the run ends; ours at the start hid it.
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        self._tracked(runner, self.client.set_terminated, self.run_id, "FAILED" if runner.failed else "FINISHED")


def log_values(client: Any, run_id: str, values: dict[str, Any], step: int) -> None:
    """The numeric `values` as MLflow metrics at `step`, in one request."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(key, float(value), now, step) for key, value in values.items() if is_number(value)]
    if metrics:
        client.log_batch(run_id, metrics=metrics)


def log_best(client: Any, run_id: str, model_dir: Path) -> None:
    """The run's best model (best/, checkpoint.save_best) as the MLflow run's artifacts."""
    for name in ("best", "best.json"):
        path = model_dir / name
        if path.is_dir():
            client.log_artifacts(run_id, str(path), name)
        elif path.is_file():
            client.log_artifact(run_id, str(path))


def bounded_client(tracking_uri: str | None) -> Any:
    """An MlflowClient whose requests wait a few seconds at most (REQUEST_LIMITS, unless set):
    MLflow's own client retries for minutes, which would stall whoever asks."""
    from mlflow.tracking import MlflowClient

    for name, value in {**REQUEST_LIMITS, **QUIET}.items():
        os.environ.setdefault(name, value)
    return MlflowClient(tracking_uri=tracking_uri)


def same_server(recorded: str | None, client: Any) -> bool:
    """Whether mlflow.json's server (kept without its password) is the one `client` talks to."""
    return recorded in (shown_uri(client.tracking_uri), client.tracking_uri)


def send_kept(model_dir: Path, tracking_uri: str | None) -> str | None:
    """What a run ended during an outage kept in mlflow.json (phase values, best/, its end), sent now:
    `dslrun run` of the finished run, or a sweep's end for its trials, closes the MLflow run. What
    was sent (None: nothing was kept, or it was kept for another server); an exception when the
    server still does not answer. `tracking_uri` is the pipeline's, password and all: the record
    keeps it without the password."""
    from dsl.engine.rundir import atomic_write_text

    path = Path(model_dir) / "mlflow.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not record.get("unsent") and not record.get("end"):
        return None
    client, run_id = bounded_client(tracking_uri), record["run_id"]
    if not same_server(record.get("tracking_uri"), client):
        return None  # the pipeline tracks elsewhere now
    kept = record.get("unsent", [])
    for values, step in kept:
        log_values(client, run_id, values, int(step))
    if record.get("end"):
        log_best(client, run_id, Path(model_dir))
        client.set_terminated(run_id, record["end"])
    atomic_write_text(path, json.dumps({k: v for k, v in record.items() if k not in ("unsent", "end")}) + "\n")
    ended = f" and the run's end ({record['end']})" if record.get("end") else ""
    return f"mlflow: sent the {len(kept)} phase value(s){ended} that mlflow.json kept from an outage"


def failure(exc: BaseException) -> str:
    """What failed, short: a requests error's innermost cause (`Caused by ...`, which ends its text)
    after the request's last path part, else the error's last line, at most 300 characters."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    request = re.search(r"/api/[\w./-]*/([\w-]+) failed", text)
    if "Caused by " in text:
        text = text.rsplit("Caused by ", 1)[1].removesuffix(")")  # the bracket around "Caused by ..."
        text = f"{request.group(1)}: {text}" if request else text
    return text if len(text) <= 300 else text[:297] + "..."


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """{"runner.max_epochs": "3", "callbacks.0.type": "train_basic", ...}: every leaf as text (MLflow's
    parameter names take no brackets, so a list item is `.N`)."""
    found: dict[str, str] = {}
    if isinstance(value, dict) and value:
        for key, item in value.items():
            found.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value and any(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            found.update(flatten(item, f"{prefix}.{index}"))
    elif prefix:
        found[prefix] = json.dumps(value) if not isinstance(value, str) else value
    return found

