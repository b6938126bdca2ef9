"""`dslrun migrate PATH... [--check]`: rewrite pipeline files to the language's current names.

Each component type written under a former name (`eval_basic`, now `val_basic`) is replaced
where it is written, and nothing else in the file changes: comments, key order, quoting and
indentation stay (dsl.language.migrations). Every file is rewritten on its own, extends or not:
name the base files too. PATH is a file, a directory or a glob, as for `dslrun validate`.

`--check` changes nothing and exits 1 when a file would change (for CI and pre-commit hooks).
Exit status: 0 when every file is current (or was made current), 1 on a file that cannot be read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click

from dsl.commands.validate import expand_paths


@click.command("migrate")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--check", is_flag=True, help="Change nothing; exit 1 when a file uses a former name.")
def command(paths: tuple[str, ...], check: bool) -> None:
    """Rewrite pipeline files to the current component names, keeping everything else as written."""
    from dsl.language.errors import LocatedError
    from dsl.language.migrations import migrate_text

    failed = outdated = changed = 0
    for name, problem in expand_paths(paths):
        if problem is not None:
            click.echo(problem.format_text(), err=True)
            failed += 1
            continue
        try:
            with open(name, encoding="utf-8", newline="") as handle:
                text = handle.read()
            new, renames = migrate_text(text, name)
        except LocatedError as exc:
            for diagnostic in exc.diagnostics:
                click.echo(diagnostic.format_text(), err=True)
            failed += 1
            continue
        except (OSError, UnicodeDecodeError) as exc:
            click.echo(f"{name}:1:1: error: cannot read the file: {getattr(exc, 'strerror', None) or exc}", err=True)
            failed += 1
            continue
        for where, rename in renames:
            verb = "would rename" if check else "renamed"
            click.echo(f"{where.file}:{where.line}:{where.col}: {verb} {rename.kind} type {rename.former!r} to "
                       f"{rename.current!r}")
        if renames:
            outdated += 1
            if not check:
                _replace(Path(name), new)
                changed += 1
    files = "file" if outdated == 1 else "files"
    if check and outdated:
        click.echo(f"{outdated} {files} to migrate: dslrun migrate rewrites them", err=True)
    elif changed:
        click.echo(f"{changed} {files} migrated", err=True)
    elif not failed:
        click.echo("every file uses the current names", err=True)
    raise SystemExit(1 if failed or (check and outdated) else 0)


def _replace(path: Path, text: str) -> None:
    """Write `text` over `path` through a temporary file and a rename, keeping its permissions."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        shutil.copymode(path, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
