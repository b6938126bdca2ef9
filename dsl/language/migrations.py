"""What changed in the pipeline language, and how a file written before is brought up to date.

`version: 1` is the only version of the language so far; within it, component types were renamed
(`eval_basic` is `val_basic` since the workflow's phase is called `val`), each registered with its
former names (`register(aliases=...)`). A file that uses a former name keeps validating and
running, with a warning at the place it is written (`rename_former_types`); `dslrun migrate`
rewrites the file: each former name replaced where it is written, and not one other byte of the
file changed (comments, order, quoting and indentation stay as the author wrote them). A new
version of the language adds its step here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsl.language.diagnostics import Diagnostic, Location, SourceMap
from dsl.language.diagnostics import Path as JsonPath


@dataclass(frozen=True)
class Rename:
    """A component type written under a former name: where, its kind, the name written, the name now."""

    path: JsonPath
    kind: str
    former: str
    current: str


def former_types(tree: Any) -> list[Rename]:
    """Every component type of `tree` (one file's, or a merged pipeline's) written under a former name."""
    from dsl.language import registry, sections

    if not isinstance(tree, dict):
        return []
    found = []
    for key, kind in sections.COMPONENT_SECTIONS.items():
        value = tree.get(key)
        listed = list(enumerate(value)) if kind == "callback" and isinstance(value, list) else [(None, value)]
        for index, section in listed:
            former = section.get("type") if isinstance(section, dict) else None
            current = registry.renamed(kind, former) if isinstance(former, str) else None
            if current is not None:
                path: JsonPath = (key, "type") if index is None else (key, index, "type")
                found.append(Rename(path, kind, str(former), current))
    return found


def rename_former_types(tree: Any, sources: SourceMap) -> list[Diagnostic]:
    """Replace each component type written under a former name by its name now, in `tree`.

    Old pipelines keep validating and running; each renamed type is a warning at the place
    it was written, naming the new name and the command that rewrites the file.
    """
    warnings = []
    for rename in former_types(tree):
        section = tree
        for part in rename.path[:-1]:
            section = section[part]
        section["type"] = rename.current
        where = sources.locate(rename.path)
        warnings.append(Diagnostic.at(where, rename.path, (
            f"{rename.kind} type {rename.former!r} is now called {rename.current!r}; the old name still works, "
            f"but `dslrun migrate {where.file}` rewrites it"), severity="warning"))
    return warnings


def migrate_text(text: str, file: str) -> tuple[str, list[tuple[Location, Rename]]]:
    """`text` (one pipeline file, as written) with every former type name replaced, and each
    replacement with its place. Raises `dsl.language.loader.LoadError` when it is not YAML."""
    from dsl.language.loader import LoadError, parse_text

    document = parse_text(text, file)
    if document.value is None and document.diagnostics:
        raise LoadError(document.diagnostics)
    done = [(document.sources.locate(rename.path), rename) for rename in former_types(document.value)]
    lines = text.splitlines(keepends=True)
    # Right to left, so that two on one line (a flow mapping) keep their columns.
    for where, rename in sorted(done, key=lambda item: (item[0].line, item[0].col), reverse=True):
        line = lines[where.line - 1]
        start = where.col - 1
        quote = line[start] if line[start] in "'\"" else ""
        written = f"{quote}{rename.former}{quote}"
        if not line.startswith(written, start):
            raise ValueError(f"{file}:{where.line}:{where.col}: expected {written} there")  # a loader position bug
        lines[where.line - 1] = line[:start] + f"{quote}{rename.current}{quote}" + line[start + len(written):]
    return "".join(lines), sorted(done, key=lambda item: (item[0].line, item[0].col))
