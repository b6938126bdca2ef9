"""`dslrun list [KIND]`: the catalogue of component types and their parameters."""

from __future__ import annotations

import click


@click.command("list")
@click.argument("kind", required=False)
@click.option("--markdown", is_flag=True, help="Print the whole catalogue as Markdown (docs/components.md).")
def command(kind: str | None, markdown: bool) -> None:
    """List every component type with its parameters, types, defaults and descriptions.

    KIND narrows the list to one section: pipeline, runner, inputter, augmenter, network,
    modeler or callback (plurals work too).
    """
    from dsl.language import catalogue_doc

    if markdown:
        if kind:
            raise click.UsageError("--markdown prints the whole catalogue; leave out KIND")
        click.echo(catalogue_doc.render_markdown(), nl=False)
        return
    section = None
    if kind is not None:
        section = catalogue_doc.normalise_section(kind)
        if section is None:
            from dsl.language.suggest import did_you_mean

            choices = catalogue_doc.SECTIONS
            raise click.BadParameter(
                f"unknown section {kind!r}{did_you_mean(kind, choices)}; choose one of: {', '.join(choices)}",
                param_hint="KIND",
            )
    click.echo(catalogue_doc.render_text(section), nl=False)
