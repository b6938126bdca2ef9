"""`dslrun eval FILE`: evaluate a checkpoint on the val (or test) data."""

from __future__ import annotations

import json

import click

from dsl.commands._common import load_or_exit, set_option, user_errors


@click.command("eval")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@set_option
@click.option("--checkpoint", metavar="PATH", help="Checkpoint prefix or directory (default: the run directory's latest).")
@click.option("--mode", type=click.Choice(["val", "test"]), default="val", show_default=True, help="Which data to evaluate on.")
@user_errors
def command(path: str, overrides: tuple[str, ...], checkpoint: str | None, mode: str) -> None:
    """Evaluate FILE's model on its val/test data; prints one JSON object."""
    spec = load_or_exit(path, overrides)
    from dsl.engine.launch import restored_runner
    from dsl.errors import DslError

    runner = restored_runner(spec, checkpoint)
    if not runner.inputter.has_source(mode):
        raise DslError(f"the inputter has no {mode} data; set inputter.{mode}")
    values = runner.evaluate(mode)
    record = {"mode": mode, "checkpoint": runner.restored_from, "step": runner.step, "epoch": runner.epoch, **values}
    runner.log_metrics(f"eval_{mode}", {"checkpoint": runner.restored_from, **values})
    if runner.placement.is_chief:
        click.echo(json.dumps(record))
