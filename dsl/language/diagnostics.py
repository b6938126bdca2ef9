"""Located problems: every error the language reports points at a file, line and column.

A pipeline is checked in several passes (YAML loading, extends, --set, the JSON Schema,
semantic checks). Each pass reports `Diagnostic`s instead of raising at the first problem,
so that `dslrun validate` can list every mistake of a file at once, and each pass finds the
position of a value through the `SourceMap` the loader recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

# A JSON path inside a pipeline: mapping keys and list indices, e.g. ("callbacks", 2, "type").
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Location:
    """A position in a source: a file (or "<--set 2>") with 1-based line and column."""

    file: str
    line: int = 1
    col: int = 1


@dataclass
class Diagnostic:
    """One problem, at the place where the user can fix it."""

    file: str
    line: int
    col: int
    path: str
    message: str
    severity: str = "error"

    @classmethod
    def at(cls, location: Location, path: Path | str, message: str, severity: str = "error") -> Diagnostic:
        text = path if isinstance(path, str) else format_path(path)
        return cls(location.file, location.line, location.col, text, message, severity)

    def format_text(self) -> str:
        """`file:line:col: error: path: message`, the format compilers and editors understand."""
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {where}{self.message}"

    def format_github(self) -> str:
        """A GitHub Actions workflow command, shown as an annotation on the file's line."""
        where = f"{self.path}: " if self.path else ""
        return (
            f"::{self.severity} file={_escape_property(self.file)},line={self.line},col={self.col}"
            f"::{_escape_data(where + self.message)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_path(path: Path) -> str:
    """("callbacks", 2, "type") -> "callbacks[2].type"."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def is_error(diagnostic: Diagnostic) -> bool:
    return diagnostic.severity == "error"


@dataclass(frozen=True)
class Origin:
    """Where a value was written: the value itself and, for a mapping entry, its key."""

    value: Location
    key: Location | None = None


class SourceMap:
    """JSON path -> where its value (and key) were written, across files and --set.

    Values that no source wrote (defaults) have no entry; `locate` then falls back to
    the nearest enclosing value that has one, so a diagnostic always has a position.
    """

    def __init__(self, entries: dict[Path, Origin] | None = None, root: Location | None = None) -> None:
        self.entries: dict[Path, Origin] = dict(entries or {})
        self.root = root or Location("<pipeline>")

    def __contains__(self, path: Path) -> bool:
        return path in self.entries

    def __iter__(self) -> Iterator[Path]:
        return iter(self.entries)

    def get(self, path: Path) -> Origin | None:
        return self.entries.get(path)

    def set(self, path: Path, origin: Origin) -> None:
        self.entries[path] = origin

    def locate(self, path: Path, key: bool = False) -> Location:
        """Where to point for `path`: its key (when `key` and it has one) or its value."""
        current = tuple(path)
        while current:
            origin = self.entries.get(current)
            if origin is not None:
                return origin.key if key and origin.key is not None else origin.value
            current = current[:-1]
            key = True  # for a missing child, point at the key of the parent that lacks it
        origin = self.entries.get(())
        return origin.value if origin is not None else self.root

    def diagnostic(self, path: Path, message: str, severity: str = "error") -> Diagnostic:
        """A diagnostic about the value at `path`, placed where that value was written."""
        return Diagnostic.at(self.locate(path), path, message, severity)

    def inherited_from(self, path: Path) -> Location | None:
        """Where `path`'s value was written when that is a base file the pipeline `extends`, else
        None (written in the pipeline file itself, set by --set, or a default)."""
        where, top = self.locate(path), self.root
        if path not in self.entries or where.file == top.file or where.file.startswith("<") or top.file.startswith("<"):
            return None
        return where

    def remove_under(self, path: Path) -> None:
        """Forget `path` and everything below it (it is being replaced)."""
        n = len(path)
        for p in [p for p in self.entries if p[:n] == path]:
            del self.entries[p]

    def graft(self, path: Path, other: SourceMap) -> None:
        """Copy `other`'s entries (relative to its root) to below `path`."""
        for p, origin in other.entries.items():
            self.entries[path + p] = origin
