"""`dslrun run FILE` (or just `dslrun FILE`): train a pipeline, resuming its run directory."""

from __future__ import annotations

import sys
from typing import Any

import click

from dsl.commands._common import pipeline_or_exit, set_option, user_errors


@click.command("run")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@set_option
@click.option("--no-resume", is_flag=True, help="Start fresh; the old checkpoints, best/ and metrics file are moved aside, not deleted.")
@click.option("--resume-from", metavar="PATH", help="Resume from this checkpoint (prefix or directory); an error if it does not exist.")
@user_errors
def command(path: str, overrides: tuple[str, ...], no_resume: bool, resume_from: str | None) -> None:
    """Train the pipeline in FILE on the backend it selects."""
    if no_resume and resume_from:
        raise click.UsageError("--no-resume and --resume-from contradict each other; give one")
    pipeline = pipeline_or_exit(path, overrides, starting=True)
    if resume_from is not None:
        from dsl.engine.checkpoint_paths import given_checkpoint

        resume_from = given_checkpoint(resume_from, "--resume-from")  # a wrong path: said before TensorFlow loads
    from dsl.commands._training import build_runner
    from dsl.engine.rundir import write_pipeline
    from dsl.language.pipeline import dump_pipeline

    runner = build_runner(pipeline, resume=not no_resume, resume_from=resume_from)
    owner = runner.placement.is_chief and runner.backend.trains()

    def store_pipeline() -> None:
        """Once training will happen: a finished run re-run leaves its pipeline.yaml as it was."""
        warning = write_pipeline(runner.model_dir, dump_pipeline(pipeline.to_dict()))
        if warning:
            click.echo(f"dslrun: warning: {warning}", err=True)

    code = runner.run(on_start=store_pipeline if owner else None)
    if owner and runner.stop.finished:
        from dsl.engine.rundir import differs_from_stored

        for tracking in pipeline.callbacks_of("mlflow"):
            _send_kept(runner.model_dir, tracking.params.get("tracking_uri"))
        changed = differs_from_stored(runner.model_dir, dump_pipeline(pipeline.to_dict()))
        if changed:
            # An error, not a warning: a script looping over seeds read the old run's numbers as each
            # new one's, from a command that exited 0 (trial B15). The same pipeline again stays a no-op.
            click.echo(f"dslrun: error: {changed}", err=True)
            sys.exit(1)
    if owner and code == 0:
        if not runner.stop.finished:
            given = any(setting.replace(" ", "").startswith("runner.model_dir=") for setting in overrides)
            # Trial A14 trained with --set runner.model_dir=... and then had eval and predict look in the
            # pipeline's own run directory: say how to reach this one.
            hint = (f" (set with --set: give eval, predict and export the same --set runner.model_dir={runner.model_dir}"
                    ")") if given else ""
            click.echo(f"dslrun: run directory: {runner.model_dir}{hint}")
        _final_validation(runner)
        if not pipeline.callbacks_of("checkpoint") and not runner.stop.finished:
            # A variant's callbacks list that dropped its base's checkpoint trained, then `eval` said
            # "train the pipeline first": say it at the end, where the user looks for the model.
            click.echo("dslrun: warning: no checkpoint callback: the trained weights were not kept (eval, predict and "
                       "export need them); add {type: checkpoint} to callbacks", err=True)
    sys.exit(code)


def _send_kept(model_dir: Any, tracking_uri: str | None) -> None:
    """A finished run tracked through an outage: what its end could not send, sent now."""
    from dsl.callbacks.mlflow_tracking import failure, send_kept

    try:
        sent = send_kept(model_dir, tracking_uri)
    except Exception as exc:  # the server still does not answer: the record keeps them for next time
        click.echo(f"dslrun: warning: mlflow: what mlflow.json kept is still not sent: {failure(exc)}", err=True)
        return
    if sent:
        click.echo(f"dslrun: {sent}", err=True)


def _final_validation(runner: Any) -> None:
    """The last val phase's outputs: this run's, or — for a run already finished (the same command
    run again) — its records', so a second `make demo` still says how well it does."""
    finals = [record for record in runner.history if record["mode"] == "val"]
    if not finals and runner.stop.finished and runner.metrics_file is not None:
        finals = [record for record in runner.metrics_file.read() if record.get("mode") == "val"]
    if finals:
        from dsl.engine.rundir import is_number

        # The val phase's outputs only: a record also holds fields that are none (step, time, a
        # classifier's per-class table).
        outputs = {*runner.metrics["val"], "skipped_examples"}
        values = ", ".join(f"{k} {float(v):.4f}" for k, v in finals[-1].items() if k in outputs and is_number(v))
        click.echo(f"dslrun: final validation (step {finals[-1]['step']}): {values}")

