"""`dslrun show FILE`: the pipeline exactly as a run would see it."""

from __future__ import annotations

import click

from dsl.commands._common import load_or_exit, set_option, user_errors


@click.command("show")
@click.argument("path", type=click.Path(dir_okay=True))
@set_option
@click.option("--variables", is_flag=True,
              help="Build the network (reads the data, imports TensorFlow) and list its variables: name, shape, "
                   "head or backbone, trained or not — the names init_checkpoint's skip and trainable match.")
@user_errors
def command(path: str, overrides: tuple[str, ...], variables: bool) -> None:
    """Print the resolved pipeline as YAML: extends merged, ${ENV} and --set applied, every default filled.

    This is the text a run stores as pipeline.yaml in its run directory. With --variables,
    the built network's variables instead.
    """
    pipeline = load_or_exit(path, overrides)
    if variables:
        from dsl.commands._variables import variables_table
        from dsl.language.resolved import Pipeline

        click.echo(variables_table(Pipeline.from_resolved(pipeline)), nl=False)
        return
    from dsl.language.pipeline import dump_pipeline

    click.echo(dump_pipeline(pipeline), nl=False)
