"""`mlflow`: the run in an MLflow tracking server (or a local folder): parameters, metrics, artifacts.

Rank 0 logs, once per run directory: the MLflow run's id is kept in `<model_dir>/mlflow.json`,
so a resumed run continues the same MLflow run instead of starting a second one. The resolved
pipeline is logged as parameters (flattened dotted keys, as `--set` writes them) and as the
artifact `pipeline.yaml`; the train outputs every `every_n_iters` steps and every phase's
outputs at its end, keyed `<phase>/<output>` as monitors name them; `best/` (checkpoint.save_best)
and the last checkpoint's state file at the end. A trial of `dslrun sweep` is a child run of
the sweep's run (`DSLRUN_MLFLOW_PARENT_RUN_ID`, set by the sweep).

MLflow is an optional extra (`pip install "dslrun[mlflow]"`); `dslrun validate` says so when a
pipeline uses this callback without it. The client is used directly (MlflowClient), never the
fluent API's process-wide active run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dsl.callbacks._mlflow_check import check_mlflow_installed
from dsl.engine.hooks import Callback
from dsl.engine.rundir import is_number
from dsl.language.registry import register

PARENT_ENV = "DSLRUN_MLFLOW_PARENT_RUN_ID"
_MAX_VALUE = 500  # MLflow refuses longer parameter values on some stores


@register(
    "callback",
    "mlflow",
    params={
        "tracking_uri": {
            "description": (
                "Where runs are recorded: a server (http://host:5000), a database (sqlite:///mlflow.db) or a "
                "local folder; null: MLflow's own default (MLFLOW_TRACKING_URI, else its local store)."
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
    },
    unique=True,
    description=(
        "Track the run in MLflow (rank 0): the resolved pipeline as parameters and artifact, metrics per logging "
        "step and per phase, the best model as artifacts; a resumed run continues its MLflow run. Needs "
        'pip install "dslrun[mlflow]".'
    ),
    checks=[check_mlflow_installed],
)
class MlflowTracking(Callback):
    priority = "LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.params.get("tracking_uri"))
        self.record = Path(runner.model_dir) / "mlflow.json"
        self.run_id = self._resumed_run() or self._new_run(runner)
        runner.notice(f"mlflow: run {self.run_id} at {self.client.tracking_uri}")

    def _resumed_run(self) -> str | None:
        try:
            stored = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if stored.get("tracking_uri") != self.client.tracking_uri:
            return None
        self.client.update_run(stored["run_id"], status="RUNNING")
        return str(stored["run_id"])

    def _new_run(self, runner: Any) -> str:
        from dsl.language.pipeline import dump_pipeline

        name = self.params.get("experiment") or runner.pipeline.name
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        tags = {"dslrun.model_dir": str(runner.model_dir)}
        if os.environ.get(PARENT_ENV):
            tags["mlflow.parentRunId"] = os.environ[PARENT_ENV]
        run = self.client.create_run(experiment_id, run_name=self.params.get("run_name") or Path(runner.model_dir).name,
                                     tags=tags)
        run_id = run.info.run_id
        tree = runner.pipeline.to_dict()
        self._log_params(run_id, tree)
        self.client.log_text(run_id, dump_pipeline(tree), "pipeline.yaml")
        from dsl.engine.rundir import atomic_write_text

        atomic_write_text(self.record, json.dumps({"tracking_uri": self.client.tracking_uri, "run_id": run_id}) + "\n")
        return str(run_id)

    def _log_params(self, run_id: str, pipeline: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(key, value[:_MAX_VALUE]) for key, value in flatten(pipeline).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(run_id, params=params[start:start + 100])

    def _log_metrics(self, values: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, step) for key, value in values.items() if is_number(value)]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def after_train_iter(self, runner: Any) -> None:
        if runner.step % int(self.params.get("every_n_iters", 10)) == 0:
            self._log_metrics({f"train/{k}": v for k, v in runner.outputs.items()}, runner.step)

    def after_epoch(self, runner: Any) -> None:
        self._log_metrics({f"{runner.mode}/{k}": v for k, v in runner.phase_outputs.items()}, runner.step)

    def after_run(self, runner: Any) -> None:
        model_dir = Path(runner.model_dir)
        for name in ("best", "best.json"):
            path = model_dir / name
            if path.is_dir():
                self.client.log_artifacts(self.run_id, str(path), name)
            elif path.is_file():
                self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, status="FAILED" if runner.failed else "FINISHED")


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

