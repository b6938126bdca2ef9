"""`dslrun eval FILE`: evaluate a checkpoint on the val (or test) data.

`dslrun eval --watch FILE` evaluates every checkpoint a training run writes, once each, as
they appear (see dsl.engine.watch). Evaluation always runs in this one process: a pipeline
whose runner.backend is ps is evaluated on the local backend (as predict and export do).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from dsl.commands._common import CHECKPOINT_HELP, checkpoint_option, pipeline_or_exit, set_option, user_errors


@click.command("eval")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@set_option
@click.option("--checkpoint", metavar="PATH", help=CHECKPOINT_HELP)
@click.option("--mode", type=click.Choice(["val", "test"]), default="val", show_default=True, help="Which data to evaluate on.")
@click.option("--watch", is_flag=True, help="Evaluate each new checkpoint of the run directory once, until the run ends.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="With --watch: stop after this many seconds without a new checkpoint (default: wait for the run's end).")
@user_errors
def command(path: str, overrides: tuple[str, ...], checkpoint: str | None, mode: str, watch: bool,
            timeout: float | None) -> None:
    """Evaluate FILE's model on its val/test data; prints one JSON object (one per checkpoint with --watch)."""
    if watch and checkpoint:
        raise click.UsageError("--watch evaluates the run directory's checkpoints as they appear; drop --checkpoint")
    if timeout is not None and not watch:
        raise click.UsageError("--timeout only applies to --watch")
    pipeline = pipeline_or_exit(path, overrides)
    checkpoint = checkpoint_option(checkpoint)
    from dsl.inputters import declared_modes
    from dsl.language.errors import DslError

    if mode not in declared_modes(pipeline.inputter.arguments()):  # said before any checkpoint is read
        raise DslError(f"the inputter has no {mode} data; set inputter.{mode}")

    if watch:
        from dsl.commands._training import build_runner, single_process
        from dsl.engine.watch import watch as watch_run

        runner = build_runner(single_process(pipeline))
        _require_data(runner, mode, DslError)
        sys.exit(watch_run(runner, mode=mode, timeout=timeout))

    from dsl.commands._training import restored_runner

    runner = restored_runner(pipeline, checkpoint)
    _require_data(runner, mode, DslError)
    values = runner.evaluate(mode)
    # Where the weights were taken (a best/ checkpoint's from best.json; null when unknown).
    where = {"checkpoint": runner.restored_from, "step": runner.restored_step, "epoch": runner.restored_epoch}
    record = {"mode": mode, **where, **values}
    pictures: dict[str, Any] = {}
    if _of_this_run(runner):
        runner.log_metrics(f"eval_{mode}", {**where, **values, **runner.report.outputs()})
        # A classifier's per-class table and confusion matrix (the modeler's report, dsl/engine/phase_report.py),
        # also drawn as confusion_matrix_<mode>.png next to the metrics file and in TensorBoard's eval directory.
        pictures = runner.report.write(runner, mode, "eval", int(runner.restored_step or 0),
                                       f"{mode}, step {runner.restored_step}")
    elif runner.placement.is_chief:  # another run's weights: their scores are not this run's history
        click.echo(f"dslrun: eval: {runner.restored_from} is not a checkpoint of {runner.model_dir}: the scores are "
                   "printed, not recorded in its metrics.jsonl, TensorBoard or pictures", err=True)
    if runner.placement.is_chief:
        click.echo(json.dumps({**record, **(runner.report.last or {}), **pictures}))


def _of_this_run(runner: Any) -> bool:
    """Whether the evaluated checkpoint lies in the pipeline's run directory (checkpoints/ or best/)."""
    if runner.restored_from is None:
        return True
    from pathlib import Path

    return Path(runner.model_dir).resolve() in Path(runner.restored_from).resolve().parents


def _require_data(runner: Any, mode: str, error: type) -> None:
    if not runner.inputter.has_source(mode):
        raise error(f"the inputter has no {mode} data; set inputter.{mode}")
