"""Data sets made on disk by `dslrun data`, one subcommand each, registered by the task that reads them.

A task's `data.py` defines its click commands (`dslrun data synthetic-detection ...`) and passes
each to `register`; `dslrun data` lists what every task registered, so a new task brings its own
generator without an edit here. The sets are written in the CSV + PNG layouts of
`dsl.datasets.layout`. Nothing here imports TensorFlow: numpy and Pillow write the images.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def generated_set(name: str, *, items: str, num_train: int, num_val: int,
                  num_classes: tuple[int, int, int] | None = None,
                  classes_help: str = "Classes.") -> Callable[[Callable[..., Any]], click.Command]:
    """Make `function` the registered command `dslrun data <name>`, which generates a small
    learnable set of `items` ("images", "texts"), with the options every generator takes:
    --out, --num-train, --num-val, --num-classes (default, minimum, maximum; none for data
    without classes, `num_classes=None`), --seed, --force.
    The generator's own options (an image size) are click options written below this decorator."""
    head = [
        click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write."),
        click.option("--num-train", type=click.IntRange(min=1), default=num_train, show_default=True,
                     help=f"Train {items}."),
        click.option("--num-val", type=click.IntRange(min=1), default=num_val, show_default=True, help=f"Eval {items}."),
    ]
    if num_classes is not None:
        default, low, high = num_classes
        head.append(click.option("--num-classes", type=click.IntRange(min=low, max=high), default=default,
                                 show_default=True, help=classes_help))
    tail = [
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help=f"Seed of the generated {items}."),
        click.option("--force", is_flag=True, help=f"Write the {items} again even when the directory is complete."),
    ]

    def decorate(function: Callable[..., Any]) -> click.Command:
        # click lists a command's options in the reverse order their decorators ran (the list
        # `__click_params__`): the generator's own options go between the size of the set and its seed.
        own = function.__dict__.pop("__click_params__", [])
        for option in reversed(tail):
            function = option(function)
        function.__click_params__.extend(own)  # type: ignore[attr-defined]
        for option in reversed(head):
            function = option(function)
        return register(click.command(name)(function))

    return decorate


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
