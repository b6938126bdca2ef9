"""Options and error reporting shared by the subcommands that read a pipeline."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from dsl.language.resolved import Pipeline

set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a value, e.g. --set runner.max_epochs=2 (value parsed as YAML; repeatable; a key holding dots "
         "in quotes: sweep.parameters[\"network.depth\"].values=[20, 44]).",
)

BEST = "best"  # `--checkpoint best`: the run directory's best model

CHECKPOINT_HELP = (
    "Checkpoint prefix or directory, or `best` for the run directory's best model (checkpoint.save_best); "
    "default: the run directory's latest."
)


def load_or_exit(path: str | Path, overrides: Sequence[str] = (), *, starting: bool = False,
                 reads_data: bool = False) -> dict[str, Any]:
    """The resolved pipeline; every located error (and warning) on stderr, exit status 1 on errors.

    `starting`: the pipeline is about to run here, so the components' checks of this machine run
    too (`register(start_checks=...)`: a tracking server that must answer), located like the rest;
    with `reads_data` (a run, not a sweep's driver), so does `missing_data`.
    """
    from dsl.language.checks import check_before_start
    from dsl.language.diagnostics import is_error
    from dsl.language.pipeline import check_pipeline_with_sources

    resolved, diagnostics, sources = check_pipeline_with_sources(path, overrides)
    if sources is not None:
        _LOADED[:] = [sources]
    if resolved is not None and sources is not None and starting:
        at_start = check_before_start(resolved, sources)
        if reads_data and not any(is_error(d) for d in at_start):  # the machine's problems first, then the data
            at_start += missing_data(resolved, sources, "error")
        errors = {d.path for d in at_start if is_error(d)}  # a validate warning the start makes an error: once
        diagnostics = [*(d for d in diagnostics if d.path not in errors or is_error(d)), *at_start]
    for diagnostic in diagnostics:
        click.echo(diagnostic.format_text(), err=True)
    if resolved is None or any(is_error(d) for d in diagnostics):
        sys.exit(1)
    return resolved


def missing_data(resolved: dict[str, Any], sources: Any, severity: str) -> list[Any]:
    """A located diagnostic for each data file or folder the inputter names that is not there.

    Before a run (`severity` error): the modes of its workflow, said before TensorFlow loads
    instead of 20 s later. Plain `validate` (warning): every mode, since the data may be made
    after the pipeline is written; `validate --data` reads the files themselves."""
    from dsl.inputters.common import GLOB_CHARACTERS, MODES, missing_sources, relative_note

    modes: tuple[str, ...] = MODES
    if severity == "error":
        modes = tuple(dict.fromkeys(str(phase[0]) for phase in resolved["runner"].get("workflow") or []))
    inputter = resolved.get("inputter") or {}
    found = []
    for at, value in missing_sources(inputter, modes):
        path = ("inputter", *at)
        what = "matches no file" if any(c in value for c in GLOB_CHARACTERS) else "does not exist"
        if severity == "error":
            message = (f"{value} {what}{relative_note(value)}; fix the path or create "
                       "the data (`dslrun data --help` lists the example data sets it makes)")
        else:
            message = f"{value} {what} yet{relative_note(value)}; the run stops with an error unless it is made first"
        found.append(sources.diagnostic(path, message, severity))
    return found


def pipeline_or_exit(path: str | Path, overrides: Sequence[str] = (), *, starting: bool = False) -> Pipeline:
    """`load_or_exit`, frozen into the typed pipeline the engine reads (dsl.language.resolved).

    `starting` a run: the data its workflow reads must be there too (`missing_data`)."""
    from dsl.language.resolved import Pipeline

    return Pipeline.from_resolved(load_or_exit(path, overrides, starting=starting, reads_data=starting))


def checkpoint_option(checkpoint: str | None) -> str | None:
    """`--checkpoint` as a directory, a prefix (its .index or data file named instead) or `best`: a
    path that is none of them is an error before TensorFlow loads (ten seconds on a quiet machine)."""
    if checkpoint is None or checkpoint == BEST:
        return checkpoint
    from dsl.engine.checkpoint_paths import given_checkpoint

    return given_checkpoint(checkpoint, "--checkpoint")


def rank_prefix() -> str:
    """`[rank N] ` when this process is one of several ranks a backend's launcher started (the
    backend's spec says which variables name it: horovodrun's, mpirun's), else ''."""
    import os

    from dsl.language import backend_registry

    found = backend_registry.rank_of(os.environ)
    return f"[rank {found[0]}] " if found is not None else ""


def fail(message: str, code: int = 1) -> None:
    """Print `dslrun: error: message` on stderr (naming the rank) and exit, no traceback."""
    click.echo(f"dslrun: error: {rank_prefix()}{message}", err=True)
    sys.exit(code)


def echo_err(message: str) -> None:
    click.echo(message, err=True)


Callback = Callable[..., Any]


def user_errors(function: Callback) -> Callback:
    """Turn any error the user can cause (`DslError`, raised anywhere below a command) into exit 1.

    A located error prints one `file:line:col: error: ...` line per problem, as `dslrun
    validate` does; any other prints `dslrun: error: <message>`. Never a traceback.
    """
    import functools

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from dsl.language.errors import DslError, LocatedError

        _LOADED.clear()  # positions of this command's pipeline only (several commands run in one test process)
        try:
            return function(*args, **kwargs)
        except LocatedError as exc:
            for diagnostic in exc.diagnostics:
                echo_err(f"{rank_prefix()}{diagnostic.format_text()}")
            sys.exit(1)
        except DslError as exc:
            located = located_text(str(exc))
            if located is None:
                fail(str(exc))
            echo_err(f"{rank_prefix()}{located}")
            sys.exit(1)

    return wrapper


# The positions of the pipeline this command loaded (load_or_exit): an error raised later while
# building or running it that names a key of it (`inputter.train: ...`) is located there too.
_LOADED: list[Any] = []
_KEY_PATH = re.compile(r"^([a-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])+): ")
_FILE_LINE = re.compile(r"^(\S+\.\w+) line (\d+): (.+)$", re.DOTALL)


def located_text(message: str) -> str | None:
    """`file:line:col: error: message` for a message that starts with a key of the loaded pipeline,
    or with `<data file> line N:` (a bad row, read while building); None otherwise."""
    row = _FILE_LINE.match(message)
    if row:
        return f"{row.group(1)}:{row.group(2)}:1: error: {row.group(3)}"
    key = _KEY_PATH.match(message)
    if key is None or not _LOADED:
        return None
    path = tuple(int(part[1:-1]) if part.startswith("[") else part
                 for part in re.findall(r"\[\d+\]|[^.\[\]]+", key.group(1)))
    if path not in _LOADED[0]:
        return None
    where = _LOADED[0].locate(path)
    return f"{where.file}:{where.line}:{where.col}: error: {message}"
