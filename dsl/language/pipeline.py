"""The one entry point from a pipeline file to the resolved pipeline the engine compiles.

    file ─load─► tree ─extends─► ─${ENV}─► ─--set─► ─former type names─► ─JSON Schema─► ─defaults─► ─checks─► resolved

Every pass reports located diagnostics instead of stopping at the first problem, so one
`dslrun validate` lists every mistake of a file. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsl.language.diagnostics import Diagnostic, SourceMap, is_error
from dsl.language.errors import LocatedError

if TYPE_CHECKING:
    from dsl.language.resolved import Pipeline

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class PipelineError(LocatedError):
    """A pipeline with errors; `diagnostics` holds every one of them (and any warnings)."""


def check_pipeline(
    path: str | Path, overrides: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """(resolved pipeline or None when there are errors, every diagnostic — warnings too)."""
    resolved, diagnostics, _ = check_pipeline_with_sources(path, overrides, environ)
    return resolved, diagnostics


def check_pipeline_with_sources(
    path: str | Path, overrides: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any] | None, list[Diagnostic], SourceMap | None]:
    """`check_pipeline`, plus where each value was written, for checks that come later (validate --data)."""
    from dsl.language.checks import run_checks
    from dsl.language.defaults import fill_defaults
    from dsl.language.migrations import rename_former_types
    from dsl.language.resolve import resolve
    from dsl.language.schema_errors import validate_tree
    from dsl.language.sections import load_sections

    tree = resolve(path, overrides, environ)
    diagnostics = list(tree.diagnostics)
    if tree.value is None or tree.incomplete:
        return None, _sorted(diagnostics), tree.sources
    diagnostics += rename_former_types(tree.value, tree.sources)
    schema_problems = validate_tree(tree.value, tree.sources)
    known = {d.path for d in diagnostics if is_error(d)}  # a warning there (a list replaced whole) hides no error below it
    diagnostics += [d for d in schema_problems if not _at_or_below_any(d.path, known)]
    if any(is_error(d) for d in diagnostics):
        return None, _sorted(diagnostics), tree.sources
    if tree.value.get("name") is None:
        tree.value["name"] = default_name(path)
    resolved = fill_defaults(tree.value)
    if resolved["runner"].get("model_dir") is None:
        resolved["runner"]["model_dir"] = f"runs/{resolved['name']}"
    diagnostics += run_checks(resolved, tree.sources)
    for check in load_sections().values():  # after the others, which a section's check may run again (a sweep, per value)
        diagnostics += check(resolved, tree.sources)
    if any(is_error(d) for d in diagnostics):
        return None, _sorted(diagnostics), tree.sources
    return resolved, _sorted(diagnostics), tree.sources



def load_pipeline(path: str | Path, overrides: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The resolved pipeline (extends, --set, ${ENV}, schema-valid, checked, defaults filled).

    Raises `PipelineError` with every diagnostic when there is at least one error.
    """
    resolved, diagnostics = check_pipeline(path, overrides, environ)
    if resolved is None:
        raise PipelineError(diagnostics)
    return resolved


def load_resolved(path: str | Path, overrides: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Pipeline:
    """`load_pipeline`, frozen into the typed pipeline the engine reads (dsl.language.resolved)."""
    from dsl.language.resolved import Pipeline

    return Pipeline.from_resolved(load_pipeline(path, overrides, environ))


def dump_pipeline(resolved: dict[str, Any]) -> str:
    """The resolved pipeline as YAML: top-level keys in the language's order, stable text; credentials
    taken from the environment written as their `${NAME}` references (dsl.language.secrets)."""
    import yaml

    from dsl.language.schema import TOP_LEVEL_ORDER
    from dsl.language.secrets import redacted

    resolved = redacted(resolved)

    ordered = {key: resolved[key] for key in TOP_LEVEL_ORDER if key in resolved}
    ordered.update({key: value for key, value in resolved.items() if key not in ordered})
    return yaml.dump(ordered, Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=100)


def _dumper() -> type:
    """A safe dumper writing short lists of plain values inline: `workflow: [[train, 2], [val, 1]]`."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> Any:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_is_flat(data))

    Dumper.add_representer(list, represent_list)
    return Dumper


def _is_flat(data: list[Any]) -> bool:
    """Scalars, or lists of scalars, and short enough to read on one line."""
    for item in data:
        if isinstance(item, dict):
            return False
        if isinstance(item, list) and any(isinstance(x, (dict, list)) for x in item):
            return False
    return len(repr(data)) <= 80


def default_name(path: str | Path) -> str:
    """The name of a pipeline that gives none: its file name without extension (cifar10.yaml -> cifar10)."""
    stem = _NAME_CHARS.sub("_", Path(path).stem) or "pipeline"
    return stem if stem[0].isalnum() else f"p{stem}"


def _at_or_below_any(path: str, parents: set[str]) -> bool:
    return any(path == p or path.startswith((p + ".", p + "[")) for p in parents if p)


def _sorted(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: (d.file.startswith("<"), d.file, d.line, d.col))
