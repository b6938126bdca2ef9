"""Subcommands of `dslrun`, one module each; each module exposes `command`."""

from __future__ import annotations

import importlib

import click

# What the CLI uses of the commands' shared code (its error handling), public here.
from dsl.commands._common import user_errors

__all__ = ["COMMANDS", "user_errors"]

# Module names under dsl.commands, in the order `dslrun --help` lists them.
_MODULES = ("validate", "migrate", "show", "schema", "list", "run", "launch", "sweep", "eval", "predict", "export", "data", "doctor")


def COMMANDS() -> list[click.Command]:  # a constant-like accessor
    """The click command of every subcommand module, in `--help` order."""
    return [importlib.import_module(f"dsl.commands.{name}").command for name in _MODULES]
