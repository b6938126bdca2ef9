"""The sweep's own MLflow run: the parent of its trials' runs (each trial's `mlflow` callback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.sweep.plan import SweepPlan


def client_of(tracking: dict[str, Any]) -> Any:
    """The mlflow callback's client, whose requests wait a few seconds at most, as the trials' do."""
    from dsl.callbacks.mlflow_tracking import bounded_client

    return bounded_client(tracking.get("tracking_uri"))


def parent_run(tracking: dict[str, Any], plan: SweepPlan) -> str:
    """Create the sweep's run in the trials' experiment, with the sweep's settings as parameters; its id."""
    import json

    client = client_of(tracking)
    name = tracking.get("experiment") or plan.pipeline["name"]
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    run = client.create_run(experiment_id, run_name=f"sweep {plan.study_name}", tags={"dslrun.sweep": str(plan.directory)})
    for key, value in plan.sweep.items():
        if key != "parameters":
            client.log_param(run.info.run_id, f"sweep.{key}", json.dumps(value))
    for space in plan.spaces:
        client.log_param(run.info.run_id, f"sweep.parameters.{space.path}", json.dumps(plan.sweep["parameters"][space.path]))
    return str(run.info.run_id)


def finish_parent(tracking: dict[str, Any], run_id: str, study: Any, plan: SweepPlan, code: int) -> None:
    """The sweep's best value on its run, which ends FINISHED (KILLED when interrupted, FAILED on failures)."""
    client = client_of(tracking)
    try:
        best = study.best_trial
    except ValueError:
        best = None
    if best is not None:
        client.log_metric(run_id, f"best/{plan.metric}", float(best.value), step=best.number)
        from dsl.sweep.trial import shown_number

        client.set_tag(run_id, "dslrun.best_trial", str(shown_number(best)))
    client.set_terminated(run_id, status={0: "FINISHED", 130: "KILLED"}.get(code, "FAILED"))


def mark_pruned(tracking: dict[str, Any], run_dir: Path, phases: int) -> str | None:
    """A pruned trial's MLflow run: tagged `dslrun.pruned` and ended KILLED, not FINISHED as the
    trial itself (stopped by SIGTERM, which it takes for a preemption) ended it. Why it could not
    be marked, or None."""
    import json

    try:
        run_id = json.loads((run_dir / "mlflow.json").read_text(encoding="utf-8"))["run_id"]
    except (OSError, ValueError, KeyError):
        return f"{run_dir / 'mlflow.json'} names no MLflow run"
    try:
        client = client_of(tracking)
        client.set_tag(run_id, "dslrun.pruned", f"after val phase {phases}")
        client.set_terminated(run_id, status="KILLED")
    except Exception as exc:  # the tracking server's trouble must not end the sweep
        return (" ".join(str(exc).split()) or type(exc).__name__)[:300]
    return None
