"""The `dslrun` command. `dslrun FILE.yaml` is short for `dslrun run FILE.yaml`.

Each subcommand lives in its own module under `dsl.commands`; none of them imports
TensorFlow at module level, so `validate`, `show`, `schema` and `list` stay fast.
"""

from __future__ import annotations

import click

from dsl import __version__
from dsl.commands import COMMANDS, user_errors
from dsl.distributed.rank_output import whole_lines
from dsl.language.plugins import add_plugin_option


class _DefaultRunGroup(click.Group):
    """A group whose first argument, when it is not a command, is a pipeline to run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultRunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dslrun")
def main() -> None:
    """Declarative training pipelines: validate, show and run YAML pipelines."""
    whole_lines()  # under mpirun / horovodrun: one tag per line


for _command in COMMANDS():
    add_plugin_option(_command)
    if _command.callback is not None:  # every command, so that no user error ends in a traceback
        _command.callback = user_errors(_command.callback)
    main.add_command(_command)
