"""`dslrun schema`: the pipeline JSON Schema, for editors and for the committed copy."""

from __future__ import annotations

import click


@click.command("schema")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the schema to this file instead of standard output.",
)
def command(output: str | None) -> None:
    """Print the JSON Schema (2020-12) of pipelines, generated from the component registry.

    The text is stable (sorted keys, indent 2): `dslrun schema -o schemas/pipeline.schema.json`
    regenerates the committed copy byte for byte.
    """
    from dsl.language.schema import schema_text, write_schema

    if output:
        write_schema(output)
    else:
        click.echo(schema_text(), nl=False)
