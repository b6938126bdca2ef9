"""`dslrun show FILE`: the pipeline exactly as a run would see it."""

from __future__ import annotations

import click

from dsl.commands._common import load_or_exit, set_option


@click.command("show")
@click.argument("path", type=click.Path(dir_okay=True))
@set_option
def command(path: str, overrides: tuple[str, ...]) -> None:
    """Print the resolved pipeline as YAML: extends merged, ${ENV} and --set applied, every default filled.

    This is the text a run stores as pipeline.yaml in its run directory.
    """
    from dsl.pipeline import dump_pipeline

    click.echo(dump_pipeline(load_or_exit(path, overrides)), nl=False)
