"""`dslrun validate PATH...`: check pipelines without TensorFlow, for editors, hooks and CI.

PATH may be a file, a directory (searched recursively for *.yaml and *.yml, skipping
hidden directories) or a glob (`'pipelines/**/*.yaml'`, for shells that do not expand it).
A PATH that does not exist, a glob that matches nothing and a directory without YAML
files are errors of that PATH (exit status 1), not usage errors: CI that validates
nothing should fail. No PATH at all is a usage error (exit status 2).

Every file found is checked as a complete pipeline: keep partial base files (those only
named by `extends`) outside the validated directories, or make them complete pipelines.

With `--data` the data each valid pipeline reads is checked too (`dsl.data_check`): every
listed file exists and is an image, labels, classes per split, sizes, channels, overlap of
val and train, steps per epoch at `--world-size` processes. Still no TensorFlow.

Exit status: 0 when every file is valid (warnings allowed), 1 when any has an error.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from dsl.commands._common import set_option
from dsl.language.diagnostics import Diagnostic

_GLOB_CHARS = frozenset("*?[")


@click.command("validate")
@click.argument("paths", nargs=-1, required=True)
@set_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    show_default=True,
    help="text: file:line:col lines (summary on stderr); json: one report object; github: Actions annotations.",
)
@click.option(
    "--data",
    "with_data",
    is_flag=True,
    help="Also check the data: files exist and are images, labels, classes, sizes, overlap, steps per epoch.",
)
@click.option(
    "--build",
    "with_build",
    is_flag=True,
    help="Also import TensorFlow, build the network on the declared shapes and trace one train and one val step "
    "on zero-filled batches (no data read, nothing written).",
)
@click.option(
    "--world-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="With --data: the number of processes that will train (each gets 1/N of the data per epoch). "
    "With --link: the ranks of the gradient all-reduce.",
)
@click.option(
    "--link",
    metavar="RATE",
    help="With --world-size: import TensorFlow, build the network (as --build) and print its gradient bytes per "
    "step and the ring all-reduce's time per step at N ranks, one per machine, on links of RATE (e.g. 10gbit, "
    "25gbit), from the model fitted in docs/benchmarks.md.",
)
@click.option(
    "--step-time",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --link: one rank's train step without the exchange, for the scaling efficiency at N ranks.",
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --data: inspect N images per split drawn at random instead of every one (every row is still "
    "listed and its label checked); the summary says what share of bad images the sample finds with 95% "
    "probability. For large sets: 5000 takes seconds where 1.28 million images take minutes.",
)
def command(
    paths: tuple[str, ...], overrides: tuple[str, ...], output_format: str, with_data: bool, world_size: int,
    with_build: bool = False, sample: int | None = None, link: str | None = None,
    step_time: float | None = None,
) -> None:
    """Check pipeline files: YAML, schema, extends, --set, ${ENV} and cross-section rules.

    PATHS are files, directories (searched recursively for *.yaml and *.yml) or quoted
    globs. Every error of every file is reported as `file:line:col: error: path: message`.
    Exit status: 0 all valid (warnings allowed), 1 any error (a PATH that names no file
    included), 2 usage error. TensorFlow is not imported, so this is fast enough for a
    pre-commit hook.

    With --data, the data of each valid pipeline is read too (image headers, not pixels):
    missing or broken images and bad CSV rows are located errors, an empty class, heavy
    imbalance and val images also in train are warnings, and each split is summed up
    (examples, classes, sizes, channels, steps per epoch at --world-size processes).

    With --build, TensorFlow is imported and each valid pipeline's network is built on the
    declared shapes, then one train and one val step are traced on zero-filled batches: a
    shape or dtype error is one located line at the section that caused it (seconds per
    pipeline; no data read, no run directory written).

    With --world-size N --link RATE, the network is built too, and each pipeline gets one
    line: its gradient bytes per step and what the ring all-reduce of them costs per step at
    N ranks on that link (and, with --step-time, the scaling efficiency): known before
    launching whether N ranks will scale.
    """
    if world_size != 1 and not with_data and link is None:
        raise click.UsageError("--world-size only applies to --data or --link")
    if sample is not None and not with_data:
        raise click.UsageError("--sample only applies to --data")
    if step_time is not None and link is None:
        raise click.UsageError("--step-time only applies to --link")
    if link is not None:
        from dsl.distributed.ring_allreduce import link_bits_per_s

        try:
            link_bits_per_s(link)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--link") from None
    reports: list[tuple[str, list[Diagnostic]]] = []
    summaries: dict[str, list[Any]] = {}
    restoring = False  # a pipeline with init_checkpoint: its patterns need the network (--build)
    for name, problem in expand_paths(paths):
        if problem is not None:
            reports.append((name, [problem]))
            continue
        diagnostics, resolved = _check(name, overrides, world_size if with_data else None, summaries, with_build,
                                       sample, (world_size, link, step_time) if link is not None else None)
        restoring = restoring or _restores(resolved)
        reports.append((name, diagnostics))
    _emit(reports, output_format, summaries if with_data or link is not None else None)
    failed = any(_errors(d) for _, d in reports)
    if not with_data and not failed and output_format == "text" and len(reports) == 1:
        # A trial took "0 errors" for its data too: a missing file or an unknown label is found by --data.
        click.echo(f"(the data was not read: dslrun validate --data {reports[0][0]} checks its files, labels and "
                   "classes too)", err=True)
        if not with_build and restoring:
            # A trial took "0 errors" for a trainable pattern that matches nothing: that needs the network.
            click.echo(f"(the network was not built: dslrun validate --build {reports[0][0]} matches init_checkpoint's "
                       "checkpoint and patterns with it)", err=True)
    sys.exit(1 if failed else 0)


def _restores(resolved: dict[str, Any] | None) -> bool:
    """Whether a resolved pipeline starts from a checkpoint (an init_checkpoint callback)."""
    return resolved is not None and any(isinstance(c, dict) and c.get("type") == "init_checkpoint"
                                        for c in resolved.get("callbacks") or [])


def _check(name: str, overrides: tuple[str, ...], world_size: int | None, summaries: dict[str, list[Any]],
           build: bool = False, sample: int | None = None,
           exchange: tuple[int, str, float | None] | None = None) -> tuple[list[Diagnostic], dict[str, Any] | None]:
    """The diagnostics of one file; with a `world_size`, of its data too (its split reports go to `summaries`);
    with `build`, of its network built and traced on zeros; with `exchange` (ranks, link, step time),
    that network's gradient exchange too (its plan goes to `summaries`). The resolved pipeline beside
    them (None when it has errors), for what the command says after."""
    from dsl.language.pipeline import check_pipeline_with_sources

    resolved, diagnostics, sources = check_pipeline_with_sources(name, overrides)
    if (build or exchange) and resolved is not None and sources is not None:
        from dsl.engine.build_check import build_and_check

        model, found = build_and_check(resolved, sources)
        diagnostics = diagnostics + found
        if exchange is not None and model is not None:
            summaries.setdefault(name, []).append(_exchange_summary(resolved, model, *exchange))
    if world_size is None and resolved is not None and sources is not None:
        from dsl.commands._common import missing_data

        return diagnostics + missing_data(resolved, sources, "warning"), resolved
    if world_size is None or resolved is None or sources is None:
        return diagnostics, resolved
    from dsl.commands._common import fail
    from dsl.data_check import check_data
    from dsl.language.errors import DslError

    try:
        found, splits, scaled = check_data(resolved, sources, world_size, {d.path for d in diagnostics}, sample)
    except DslError as exc:
        fail(str(exc))
    batch = scaled.scaling.batch_size if scaled else None
    summaries[name] = summaries.get(name, []) + [(split.summary(resolved["inputter"], world_size, batch), split.to_dict()) for split in splits]
    if scaled is not None and world_size > 1:
        summaries[name].append((scaled.summary(), scaled.to_dict()))
    return _once(diagnostics + found), resolved


def _once(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Each diagnostic once: a pipeline setting that every split finds wrong (COCO classes in another
    order than the file's) is one line at the setting naming each file, not one a split (trial A13
    read it twice). Messages that differ only in their last words ` in FILE` are one."""
    import re

    kept: dict[tuple[Any, ...], Diagnostic] = {}
    files: dict[tuple[Any, ...], list[str]] = {}
    for found in diagnostics:
        match = re.fullmatch(r"(.*) in (\S+)", found.message, re.DOTALL)
        text, file = (match.group(1), match.group(2)) if match else (found.message, None)
        key = (found.file, found.line, found.col, found.path, text, found.severity)
        if key not in kept:
            kept[key], files[key] = found, []
        if file is not None and file not in files[key]:
            files[key].append(file)
    for key, found in kept.items():
        if len(files[key]) > 1:
            found.message = f"{key[4]} in {', '.join(files[key][:-1])} and {files[key][-1]}"
    return list(kept.values())


def _exchange_summary(resolved: dict[str, Any], model: Any, world_size: int, link: str,
                      step_time: float | None) -> tuple[str, dict[str, Any]]:
    from dsl.commands._exchange_plan import exchange_plan, gradient_sizes
    from dsl.distributed.scaling import replicas_for
    from dsl.language.resolved import Pipeline

    asynchronous = world_size > 1 and replicas_for(Pipeline.from_resolved(resolved).runner, world_size) == 1
    text, details = exchange_plan(gradient_sizes(model), world_size, link, step_time, asynchronous)
    return text, {"exchange": details}


def expand_paths(paths: tuple[str, ...]) -> list[tuple[str, Diagnostic | None]]:
    """Each file to check, in order and once; a diagnostic instead for a PATH that names none."""
    found: list[tuple[str, Diagnostic | None]] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        key = os.path.normpath(os.path.abspath(name))
        if key not in seen:
            seen.add(key)
            found.append((name, None))

    for path in paths:
        if os.path.isdir(path):
            files = _yaml_files(Path(path))
            if not files:
                found.append((path, Diagnostic(path, 1, 1, "", "no .yaml or .yml files in this directory")))
            for file in files:
                add(file)
        elif os.path.lexists(path) or not _GLOB_CHARS & set(path):
            add(path)  # a missing file is reported by the loader, located at the file
        else:
            matches = sorted(m for m in glob.glob(path, recursive=True) if os.path.isfile(m))
            if not matches:
                found.append((path, Diagnostic(path, 1, 1, "", "the pattern matches no file")))
            for match in matches:
                add(match)
    return found


def _yaml_files(directory: Path) -> list[str]:
    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith((".yaml", ".yml"))]
    return files


def _errors(diagnostics: list[Diagnostic]) -> int:
    return sum(1 for d in diagnostics if d.severity == "error")


def _emit(reports: list[tuple[str, list[Diagnostic]]], output_format: str, data: dict[str, list[Any]] | None) -> None:
    """Diagnostics (and, with --data, one summary per split) in the chosen format; the count on stderr."""
    files = len(reports)
    invalid = sum(1 for _, d in reports if _errors(d))
    if output_format == "json":  # per file, each file's own diagnostics
        errors = sum(_errors(d) for _, d in reports)
        warnings = sum(len(d) - _errors(d) for _, d in reports)
        entries = []
        for name, d in reports:
            entry: dict[str, Any] = {"file": name, "valid": not _errors(d), "diagnostics": [x.to_dict() for x in d]}
            if data is not None:
                entry["data"] = [details for _, details in data.get(name, [])]
            entries.append(entry)
        document = {
            "files": entries,
            "summary": {"files": files, "invalid": invalid, "errors": errors, "warnings": warnings},
        }
        click.echo(json.dumps(document, indent=2))
        return
    # A broken base file is reported once, not once per file extending it, and counted as printed
    # (trial B16 read "2 warnings" under one line).
    printed: dict[str, Diagnostic] = {}
    for name, diagnostics in reports:
        for diagnostic in diagnostics:
            line = diagnostic.format_github() if output_format == "github" else diagnostic.format_text()
            if line not in printed:
                printed[line] = diagnostic
                click.echo(line)
        for summary, _ in (data or {}).get(name, []):
            click.echo(f"::notice file={name}::{summary}" if output_format == "github" else f"{name}: {summary}")
    shown = list(printed.values())
    errors, warnings = _errors(shown), len(shown) - _errors(shown)
    summary = f"{_count(files, 'file')}, {invalid} invalid, {_count(errors, 'error')}"
    if warnings:
        summary += f", {_count(warnings, 'warning')}"
    sys.stdout.flush()  # the lines before the count, whole: `2>&1 | tee` interleaved them (trial A16)
    click.echo(summary, err=True)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
