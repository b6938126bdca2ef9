"""Data sets made on disk by `dslrun data`, one subcommand each, registered by the task that reads them.

A task's `data.py` defines its click commands (`dslrun data synthetic-detection ...`) and passes
each to `register`; `dslrun data` lists what every task registered, so a new task brings its own
generator without an edit here. The sets are written in the CSV + PNG layouts of
`dsl.datasets.layout`. Nothing here imports TensorFlow: numpy and Pillow write the images.
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.language.errors import DslError

_COMMANDS: dict[str, click.Command] = {}


def register(command: click.Command) -> click.Command:
    """Add `command` to `dslrun data` under its own name; a name registered twice raises."""
    name = command.name or ""
    if name in _COMMANDS:
        raise DslError(f"the data set {name!r} is registered twice ({_COMMANDS[name].callback} and {command.callback})")
    _COMMANDS[name] = command
    return command


def commands() -> dict[str, click.Command]:
    """Every registered data set's command, by name (the tasks' modules imported first)."""
    from dsl.language import registry

    registry.load_all()
    return dict(_COMMANDS)


def require_image_libraries() -> None:
    """numpy and Pillow come with the `train` extra; say so instead of a traceback."""
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as exc:
        raise DslError(f"dslrun data needs numpy and Pillow ({exc.name} is missing); pip install 'dslrun[train]'") from None


def say_written(out: Path, written: bool, counts: dict[str, int], items: str, what: str) -> None:
    """What was written (or that OUT was complete already) and the two listings."""
    if written:
        click.echo(f"wrote {counts['train']} train + {counts['eval']} eval {items} ({what}) to {out}")
    else:
        click.echo(f"{out} is already complete ({counts['train']} train + {counts['eval']} eval {items}); "
                   "--force writes it again")
    click.echo(f"  {out / 'train.csv'}\n  {out / 'eval.csv'}")
