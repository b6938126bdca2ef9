"""`dslrun data`: make data sets on disk in the layouts the inputters read.

    dslrun data synthetic --out data/synthetic      # small learnable set, a few seconds
    dslrun data cifar10 --out data/cifar10          # download, check MD5, convert
    dslrun data synthetic-segmentation --out data/shapes   # images + class-index PNG masks
    dslrun data synthetic-text --out data/reviews    # a CSV of short labelled texts
    dslrun data synthetic-detection --out data/boxes  # shapes with boxes: a box CSV and COCO JSON

Each subcommand is a task's (its `data.py` registers it with dsl.datasets): this group lists what
the tasks registered, an installed plug-in task's included. Re-running over a complete directory with the same settings does nothing
(pass --force to write it again); an interrupted run leaves the directory marked incomplete, and
the next run writes it again.
"""

from __future__ import annotations

import click

from dsl.commands._common import user_errors
from dsl.datasets import commands
from dsl.language.plugins import load_plugins


class _DataSets(click.Group):
    """The data sets the tasks registered, found when `dslrun data` is run, not when it is imported:
    a plug-in task's among them (installed plug-ins, and `dslrun data --plugin MODULE NAME`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        load_plugins(ctx.params.get("plugins") or (), installed=True)
        return sorted(commands())

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """The group's own options are parsed by now: its plug-ins are imported before a data set is looked up."""
        user_errors(load_plugins)(ctx.params.get("plugins") or (), installed=True)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return commands().get(name)

    def invoke(self, ctx: click.Context) -> object:
        """The chosen data set's command, its errors as every command's (a line, exit 1)."""
        return user_errors(super().invoke)(ctx)


@click.group("data", cls=_DataSets)
def command() -> None:
    """Make data sets on disk in the layouts the inputters read (CSV + PNG, CSV of texts)."""
