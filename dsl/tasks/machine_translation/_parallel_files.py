"""Sentence pairs from the files a `parallel_text` section names, every bad line located.

Two layouts, per mode and per entry of a list:

    train: data/train.tsv                                  # source<TAB>target per line
    train: {source: data/train.en, target: data/train.de}  # line n of one translates line n of the other

Pure Python (no TensorFlow, no SentencePiece): `dslrun validate --data` reads the same pairs the
inputter trains on. A line-count mismatch, an empty side or a TSV line without exactly one tab
is a problem naming its file and line; the inputter stops on the first, `validate --data` lists
them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.inputters.common import existing_file
from dsl.inputters.text_files import decoded
from dsl.language.errors import DslError

GENERATOR = "synthetic-translation"


@dataclass(frozen=True)
class Pair:
    """One sentence pair and where it was read (`file line n`, the target file's when two)."""

    source: str
    target: str
    where: str
    path: str
    line: int


@dataclass
class PairSplit:
    """The pairs of one mode, in file order."""

    key: str  # the YAML key, e.g. "inputter.train"
    pairs: list[Pair] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def sources(self) -> list[str]:
        return [pair.source for pair in self.pairs]

    @property
    def targets(self) -> list[str]:
        return [pair.target for pair in self.pairs]


def entries(value: Any) -> list[Any]:
    """A mode's value as a list of entries (a TSV path or a {source, target} mapping)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def describe(entry: Any) -> str:
    """An entry as a user wrote it, for messages."""
    return f"{entry['source']} + {entry['target']}" if isinstance(entry, dict) else str(entry)


def read_split(value: Any, key: str) -> PairSplit:
    """Every pair of a mode; the first problem is an error naming its file and line."""
    split = PairSplit(key)
    for pair, problem in pairs_of(value, key):
        if problem is not None:
            raise DslError(problem)
        assert pair is not None
        split.pairs.append(pair)
    return split


def pairs_of(value: Any, key: str) -> Iterator[tuple[Pair | None, str | None]]:
    """(pair, None) per good line and (None, problem) per bad one, over every entry of a mode."""
    for index, entry in enumerate(entries(value)):
        where = key if not isinstance(value, list) else f"{key}[{index}]"
        try:
            if isinstance(entry, dict):
                yield from _aligned(existing_file(entry["source"], f"{where}.source", GENERATOR),
                                    existing_file(entry["target"], f"{where}.target", GENERATOR))
            else:
                yield from _tsv(existing_file(entry, where, GENERATOR))
        except DslError as exc:
            yield None, str(exc)


def _lines(path: Path) -> list[str]:
    try:
        text = decoded(path.read_bytes(), path)
    except OSError as exc:
        raise DslError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line
    return [line.rstrip("\r") for line in lines]


def _tsv(path: Path) -> Iterator[tuple[Pair | None, str | None]]:
    lines = _lines(path)
    if not lines:
        yield None, f"{path}: holds no sentence pairs; expected one `source<TAB>target` per line"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue  # blank lines separate nothing; skipped, as a text file's trailing ones
        fields = line.split("\t")
        if len(fields) != 2:
            yield None, (f"{path} line {number}: expected `source<TAB>target` (one tab), found {len(fields) - 1} tabs; "
                         "a TSV line holds one sentence pair")
            continue
        yield _pair(fields[0], fields[1], str(path), number, f"{path.name} line {number}")


def _aligned(source: Path, target: Path) -> Iterator[tuple[Pair | None, str | None]]:
    left, right = _lines(source), _lines(target)
    if len(left) != len(right):
        shorter = source if len(left) < len(right) else target
        yield None, (f"{shorter} line {min(len(left), len(right)) + 1}: {source} has {len(left)} lines and {target} "
                     f"{len(right)}; line n of one must translate line n of the other")
        return
    if not left:
        yield None, f"{source}: holds no sentences; expected one sentence per line, aligned with {target}"
    for number, (src, tgt) in enumerate(zip(left, right), 1):
        if not src.strip() and not tgt.strip():
            continue
        yield _pair(src, tgt, str(target), number, f"{source.name}/{target.name} line {number}",
                    source_path=str(source))


def _pair(source: str, target: str, path: str, line: int, where: str,
          source_path: str | None = None) -> tuple[Pair | None, str | None]:
    for side, text, side_path in (("source", source, source_path or path), ("target", target, path)):
        if not text.strip():
            return None, f"{side_path} line {line}: the {side} sentence is empty; every pair needs both sides"
    return Pair(source.strip(), target.strip(), where, path, line), None
