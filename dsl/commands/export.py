"""`dslrun export FILE --out DIR`: a SavedModel with a serving signature."""

from __future__ import annotations

import click

from dsl.commands._common import load_or_exit, set_option, user_errors


@click.command("export")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory of the SavedModel.")
@set_option
@click.option("--checkpoint", metavar="PATH", help="Checkpoint prefix or directory (default: the run directory's latest).")
@user_errors
def command(path: str, out: str, overrides: tuple[str, ...], checkpoint: str | None) -> None:
    """Export FILE's trained model as a SavedModel.

    The `serving_default` signature takes `images` (float32, N x H x W x C, values in
    [0, 1]), applies the augmenter's eval preprocessing, and returns `classes` and
    `probabilities`.
    """
    spec = load_or_exit(path, overrides)
    from dsl.engine.export import export_saved_model
    from dsl.engine.launch import restored_runner

    runner = restored_runner(spec, checkpoint)
    export_saved_model(runner, out)
    click.echo(f"dslrun: exported {runner.restored_from} to {out}")
