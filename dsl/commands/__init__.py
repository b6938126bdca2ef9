"""Subcommands of `dslrun`, one module each; each module exposes `command`."""

from __future__ import annotations

import importlib

import click

# Module names under dsl.commands, in the order `dslrun --help` lists them.
_MODULES = ("validate", "show", "schema", "list", "run", "launch", "eval", "predict", "export", "data", "doctor")


def COMMANDS() -> list[click.Command]:  # noqa: N802 - a constant-like accessor
    """The click commands of every subcommand module that exists."""
    found = []
    for name in _MODULES:
        try:
            module = importlib.import_module(f"dsl.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"dsl.commands.{name}":
                raise
            continue
        found.append(module.command)
    return found
