"""Reading a pipeline file into plain Python values, remembering where each value was written.

PyYAML's `safe_load` forgets positions, silently keeps the last of two duplicate keys,
expands alias bombs until memory runs out, and turns `2024-01-01` into a date. So this
module composes the YAML node graph (C parser when available) and builds the values
itself, with these rules:

- Only plain YAML: mappings, lists, strings, integers, floats, booleans and null. Any
  other tag (`!!python/object`, `!!binary`, `!!set`, `!custom`, ...) is an error.
- Floats may be written 1e-4 (YAML 1.1 alone would read that as a string).
- Timestamps are kept as the text written (`2024-01-01` stays the string "2024-01-01").
- Mapping keys are the text written (`on:` is the key "on", not the boolean true).
- Merge keys (`<<: *base`) work as in YAML 1.1: keys written in the mapping win over
  merged ones, earlier merged mappings win over later ones.
- Anchors and aliases work; a file expanding to more than `MAX_VALUES` values (a
  "billion laughs" alias bomb), an alias to itself, or nesting deeper than `MAX_DEPTH`
  fails at once, before memory grows.
- Duplicate keys are errors naming both lines; tabs in indentation are errors.
- Files must be UTF-8 text (a BOM is allowed) of at most `MAX_BYTES`.

Every problem becomes a located `Diagnostic`; `LoadError` carries all that were found.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dsl.language.diagnostics import Diagnostic, Location, Origin, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import LocatedError

MAX_BYTES = 1 << 20
MAX_VALUES = 100_000
MAX_DEPTH = 100
# Flow brackets nested deeper than this are parsed by the pure-Python parser, which fails
# cleanly, because the C parser recurses on the C stack and can crash the interpreter.
_C_PARSER_MAX_BRACKETS = 1000


def _with_exponent_floats(base: type) -> type:
    """`base` that also reads 1e-4 and 5E3 as floats (YAML 1.1 needs 1.0e-4; users write 1e-4)."""
    loader = type(f"Pipeline{base.__name__}", (base,), {})
    cast(Any, loader).add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return loader


_PURE_LOADER = _with_exponent_floats(yaml.SafeLoader)
_LOADER = _with_exponent_floats(yaml.CSafeLoader) if hasattr(yaml, "CSafeLoader") else _PURE_LOADER
_CORE = "tag:yaml.org,2002:"
_SAFE = SafeConstructor()
_TOO_MANY = f"the document expands to more than {MAX_VALUES} values (aliases of aliases?); a pipeline is much smaller"


class LoadError(LocatedError):
    """A file (or --set value) that could not be read as a pipeline tree."""


@dataclass
class Document:
    """A loaded YAML document: its value, where every value came from, and non-fatal problems."""

    value: Any
    sources: SourceMap
    diagnostics: list[Diagnostic] = field(default_factory=list)


REPLACE_TAG = "!replace"
APPEND_TAG = "!append"
MERGE_TAG = "!merge"
REMOVE_TAG = "!remove"


class Replace(dict):  # type: ignore[type-arg]
    """A mapping tagged `!replace`: `extends` takes it whole instead of merging it into the base's
    (dsl.language.resolve.merge). One of the two tags a pipeline may use; it never outlives the merge."""


class ReplaceList(list):  # type: ignore[type-arg]
    """A list tagged `!replace`: it replaces the base's list as a plain list does, and says it is
    meant to, so `extends` does not warn about the base's components it drops."""


class MergeList(list):  # type: ignore[type-arg]
    """A list of components tagged `!merge`: `extends` merges each item into the base's item of the
    same `type` (its keys over the base's) and adds the others after the base's list, so a variant
    changes one inherited callback without copying the list. It never outlives the merge."""


class Remove(dict):  # type: ignore[type-arg]
    """An item of a `!merge` list tagged `!remove` (`- !remove {type: init_checkpoint}`): `extends`
    takes the base's item of that type out of the list (a from-scratch variant of a fine-tuning
    pipeline, trial B13, had to copy every other callback under `!replace`). It never outlives the merge."""


class Append(list):  # type: ignore[type-arg]
    """A list tagged `!append`: `extends` adds its items after the base's list instead of
    replacing it (a callback added without copying the base's callbacks). It never outlives the merge."""


def load_file(path: str | Path, display: str | None = None) -> Document:
    """Load a pipeline file: a mapping at the top, every value located.

    `display` is the file name used in diagnostics (default: `path` as given).
    Raises `LoadError` when the file cannot be read or is not valid YAML; problems that
    still leave a usable tree (duplicate keys, bad tags) are in `Document.diagnostics`.
    """
    name = display or str(path)
    text = read_text(Path(path), name)
    document = parse_text(text, name)
    if document.value is None and document.diagnostics:
        raise LoadError(document.diagnostics)
    if document.value is None:
        raise LoadError([Diagnostic(name, 1, 1, "", "the file is empty; expected a pipeline mapping such as `version: 1`")])
    if not isinstance(document.value, dict):
        kind = _kind(document.value)
        where = document.sources.locate(())
        raise LoadError(
            [
                Diagnostic.at(
                    where,
                    "",
                    f"the top level of the file is {kind}; expected a mapping of keys (version:, inputter:, network:, ...)",
                )
            ]
        )
    return document


def read_text(path: Path, name: str) -> str:
    """The file's text, or a LoadError saying why it is not a readable UTF-8 text file."""

    def fail(message: str, line: int = 1, col: int = 1) -> LoadError:
        return LoadError([Diagnostic(name, line, col, "", message)])

    if not os.path.lexists(path):
        raise fail("no such file; check the path")
    if path.is_dir():
        raise fail("is a directory, not a pipeline file")
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise fail(f"cannot read the file: {exc.strerror or exc}") from None
    if size > MAX_BYTES or len(data) > MAX_BYTES:
        raise fail(f"the file is larger than {MAX_BYTES / (1 << 20):g} MiB; a pipeline is a short text file")
    nul = data.find(b"\0")
    if nul >= 0:
        line, col = _byte_position(data, nul)
        raise fail(f"binary file (NUL byte at offset {nul}); expected a YAML text file", line, col)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(data, exc.start)
        raise fail(
            f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not valid UTF-8; save the file as UTF-8",
            line,
            col,
        ) from None
    return text.removeprefix("\ufeff")


def parse_text(text: str, file: str, line_base: int = 0, col_base: int = 0) -> Document:
    """Parse one YAML document into plain values with positions.

    `line_base`/`col_base` shift the positions, for text that is part of something else
    (a --set argument). An empty document gives the value None.
    """
    try:
        node = _compose(text)
    except RecursionError:
        raise LoadError([Diagnostic(file, 1, 1, "", f"values are nested more than {MAX_DEPTH} levels deep")]) from None
    except yaml.MarkedYAMLError as exc:
        raise LoadError([_yaml_error(exc, text, file, line_base, col_base)]) from None
    except yaml.YAMLError as exc:  # errors without a position (e.g. a bad encoding)
        raise LoadError([Diagnostic(file, 1 + line_base, 1 + col_base, "", f"invalid YAML: {exc}")]) from None
    builder = _Builder(file, line_base, col_base)
    if node is None:
        return Document(None, SourceMap(root=Location(file, 1 + line_base, 1 + col_base)))
    builder.sources.set((), Origin(builder.loc(node.start_mark)))
    builder.sources.root = builder.loc(node.start_mark)
    builder.refuse_bombs(node)  # before building: the one place the value count is limited
    value = builder.build(node, (), 0)
    return Document(value, builder.sources, builder.diagnostics)


def _compose(text: str) -> Node | None:
    loader = _LOADER
    if _max_bracket_depth(text) > _C_PARSER_MAX_BRACKETS:
        loader = _PURE_LOADER
    return yaml.compose(text, Loader=loader)


def _max_bracket_depth(text: str) -> int:
    """An upper bound of flow nesting (brackets in strings count too: it only picks a parser)."""
    if "[" not in text and "{" not in text:
        return 0
    steps = (1 if c in "[{" else -1 for c in re.findall(r"[\[\]{}]", text))
    return max(accumulate(steps, initial=0))


def _yaml_error(exc: yaml.MarkedYAMLError, text: str, file: str, line_base: int, col_base: int) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line if mark else 0
    col = mark.column if mark else 0
    lines = text.split("\n")
    if line >= len(lines):  # past the end (the C parser's "end of stream"): the end of the last line
        line, col = len(lines) - 1, len(lines[-1])
    char = lines[line][col] if line < len(lines) and col < len(lines[line]) else ""
    if char == "\t":
        message = "tab character; YAML indents (and separates) with spaces only: replace the tab with spaces"
    else:
        parts = [exc.context, exc.problem]
        message = "invalid YAML: " + "; ".join(p for p in parts if p)
        if exc.problem and "cannot start any token" in exc.problem and char:
            message += f" ({char!r})"
    return Diagnostic(file, line + 1 + line_base, col + 1 + (col_base if line == 0 else 0), "", message)


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, col


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty"
    return f"a single value ({value!r})"


def _node_kind(node: Node) -> str:
    return "a list" if isinstance(node, SequenceNode) else "a mapping" if isinstance(node, MappingNode) else "a single value"


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


class _TooBig(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic


def _children(node: Node) -> list[tuple[str | int | None, Node]]:
    """The nodes the builder turns into values below `node`, each with its key or index.

    Merge sources (`<<: [*a, *b]`) count as children with no key of their own; keys do not
    count: the builder does not make values of them.
    """
    if isinstance(node, SequenceNode):
        return list(enumerate(node.value))
    if not isinstance(node, MappingNode):
        return []
    children: list[tuple[str | int | None, Node]] = []
    for key_node, value_node in node.value:
        if key_node.tag == _CORE + "merge":
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            children.extend((None, source) for source in sources)
        else:
            children.append((key_node.value if isinstance(key_node, ScalarNode) else None, value_node))
    return children


class _Expansion:
    """How many values each node expands to, counted on the node graph without expanding it.

    Aliases share nodes, so remembering each node's size makes counting cost one visit per
    node: a bomb that would expand to 9**30 values is refused in microseconds, whatever the
    machine, instead of after building `MAX_VALUES` values. Sizes stop at `MAX_VALUES + 1`;
    cycles and nesting past `MAX_DEPTH` are left to the builder, which names them.
    """

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.active: set[int] = set()

    def size(self, node: Node, depth: int = 0) -> int:
        known = self.sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in self.active or depth > MAX_DEPTH:
            return 1
        self.active.add(id(node))
        total = 1
        for _, child in _children(node):
            total = min(total + self.size(child, depth + 1), MAX_VALUES + 1)
        self.active.discard(id(node))
        self.sizes[id(node)] = total
        return total

    def crossing(self, node: Node) -> tuple[Node, JsonPath]:
        """The node (and its path) at which building in document order passes `MAX_VALUES`."""
        built, path = 0, cast(JsonPath, ())
        while True:
            built += 1
            for key, child in _children(node):
                if built + self.size(child) > MAX_VALUES:
                    node, path = child, path if key is None else path + (key,)
                    break
                built += self.size(child)
            else:
                return node, path


class _Builder:
    """Turns composed YAML nodes into plain values, counting them and recording positions."""

    def __init__(self, file: str, line_base: int = 0, col_base: int = 0) -> None:
        self.file = file
        self.line_base = line_base
        self.col_base = col_base
        self.count = 0
        self.active: set[int] = set()
        self.sources = SourceMap(root=Location(file, 1 + line_base, 1 + col_base))
        self.diagnostics: list[Diagnostic] = []

    def loc(self, mark: Any) -> Location:
        col = mark.column + 1 + (self.col_base if mark.line == 0 else 0)
        return Location(self.file, mark.line + 1 + self.line_base, col)

    def error(self, node: Node, path: JsonPath, message: str) -> None:
        self.diagnostics.append(Diagnostic.at(self.loc(node.start_mark), path, message))

    def refuse_bombs(self, root: Node) -> None:
        """Raise `LoadError` if `root` expands to more than `MAX_VALUES` values (before building)."""
        expansion = _Expansion()
        if expansion.size(root) > MAX_VALUES:
            node, path = expansion.crossing(root)
            raise LoadError([Diagnostic.at(self.loc(node.start_mark), path, _TOO_MANY)])

    def build(self, node: Node, path: JsonPath, depth: int) -> Any:
        try:
            return self._build(node, path, depth)
        except _TooBig as exc:
            raise LoadError([exc.diagnostic]) from None

    def _build(self, node: Node, path: JsonPath, depth: int) -> Any:
        self.count += 1  # values built; `refuse_bombs` has bounded it by MAX_VALUES already
        if depth > MAX_DEPTH:
            raise _TooBig(Diagnostic.at(self.loc(node.start_mark), path, f"values are nested more than {MAX_DEPTH} levels deep"))
        if id(node) in self.active:
            raise _TooBig(Diagnostic.at(self.loc(node.start_mark), path, "an alias refers to a value that contains it"))
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        self.active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return self._sequence(node, path, depth)
            return self._mapping(cast(MappingNode, node), path, depth)
        finally:
            self.active.discard(id(node))

    def _scalar(self, node: ScalarNode, path: JsonPath) -> Any:
        tag = node.tag
        if tag == _CORE + "str" or tag == _CORE + "timestamp":
            return node.value
        if tag == _CORE + "null":
            return None
        constructors = {"bool": _SAFE.construct_yaml_bool, "int": _SAFE.construct_yaml_int, "float": _SAFE.construct_yaml_float}
        construct = constructors.get(tag[len(_CORE) :]) if tag.startswith(_CORE) else None
        if construct is None:
            self._bad_tag(node, path)
            return None
        try:
            return construct(node)
        except (ValueError, OverflowError):  # YAML 1.1 patterns that are no number (`0b_`): keep the text
            return node.value

    def _bad_tag(self, node: Node, path: JsonPath) -> None:
        if node.tag in (REPLACE_TAG, APPEND_TAG, MERGE_TAG, REMOVE_TAG):
            wanted = {REPLACE_TAG: "a mapping or a list (it replaces the base's whole)",
                      APPEND_TAG: "a list (its items go after the base's)",
                      MERGE_TAG: "a list of components (each merges into the base's item of its type)",
                      REMOVE_TAG: "an item of a !merge list, a mapping naming the base's component to take out "
                                  "({type: init_checkpoint})"}[node.tag]
            self.error(node, path, f"the tag {node.tag} applies to {wanted}, not to {_node_kind(node)}")
            return
        self.error(
            node,
            path,
            f"the tag {_tag_name(node.tag)} is not allowed; pipelines use plain YAML "
            "(strings, numbers, booleans, null, lists and mappings), and `extends` the tags !replace, !append, !merge and !remove",
        )

    def _sequence(self, node: SequenceNode, path: JsonPath, depth: int) -> list[Any] | None:
        if node.tag not in (_CORE + "seq", APPEND_TAG, REPLACE_TAG, MERGE_TAG):
            self._bad_tag(node, path)
            return None
        kinds: dict[str, type[list[Any]]] = {APPEND_TAG: Append, REPLACE_TAG: ReplaceList, MERGE_TAG: MergeList}
        items: list[Any] = kinds.get(str(node.tag), list)()
        for index, child in enumerate(node.value):
            child_path = path + (index,)
            self.sources.set(child_path, Origin(self.loc(child.start_mark)))
            item = self._build(child, child_path, depth + 1)
            if isinstance(item, Remove) and not isinstance(items, MergeList):
                self.error(child, child_path, "the tag !remove takes an item out of the base's list: use it in a list "
                           "tagged !merge (callbacks: !merge [!remove {type: init_checkpoint}])")
                item = None
            items.append(item)
        return items

    def _mapping(self, node: MappingNode, path: JsonPath, depth: int) -> dict[str, Any] | None:
        if node.tag not in (_CORE + "map", REPLACE_TAG, REMOVE_TAG) or (node.tag == REMOVE_TAG and not (
                path and isinstance(path[-1], int))):
            self._bad_tag(node, path)
            return None
        result: dict[str, Any] = {REPLACE_TAG: Replace, REMOVE_TAG: Remove}.get(str(node.tag), dict)()
        explicit: dict[str, Node] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _CORE + "merge":
                merges.append(value_node)
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            if key in explicit:
                first = self.loc(explicit[key].start_mark)
                self.error(key_node, path + (key,), f"duplicate key {key!r} (first written at line {first.line})")
                continue
            explicit[key] = key_node
        for merge in merges:
            self._merge(merge, path, depth, result, explicit)
        for key_node, value_node in node.value:
            if key_node.tag == _CORE + "merge" or not isinstance(key_node, ScalarNode):
                continue
            key = key_node.value
            if explicit.get(key) is not key_node:
                continue
            child_path = path + (key,)
            self.sources.remove_under(child_path)
            self.sources.set(child_path, Origin(self.loc(value_node.start_mark), self.loc(key_node.start_mark)))
            result[key] = self._build(value_node, child_path, depth + 1)
        if isinstance(result, Remove) and (set(result) != {"type"} or not isinstance(result["type"], str)):
            self.error(node, path, "a !remove item names only the type of the base's component to take out "
                       "(!remove {type: init_checkpoint}); its other keys would mean nothing")
        return result

    def _key(self, key_node: Node, path: JsonPath) -> str | None:
        if not isinstance(key_node, ScalarNode):
            self.error(key_node, path, "a key must be a plain name, not a list or mapping")
            return None
        if key_node.tag not in {_CORE + t for t in ("str", "int", "float", "bool", "null", "timestamp")}:
            self._bad_tag(key_node, path)
            return None
        return str(key_node.value)

    def _merge(self, value_node: Node, path: JsonPath, depth: int, result: dict[str, Any], explicit: dict[str, Node]) -> None:
        """`<<: *a` or `<<: [*a, *b]`: add keys not written explicitly; earlier sources win."""
        sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
        for source in sources:
            if not isinstance(source, MappingNode):
                self.error(source, path, "a merge key (<<) needs a mapping or a list of mappings")
                continue
            outer, self.sources = self.sources, SourceMap()
            try:
                merged = self._build(source, (), depth + 1)
            finally:
                staged, self.sources = self.sources, outer
            taken = set()
            for key, value in (merged or {}).items():
                if key not in explicit and key not in result:
                    result[key] = value
                    taken.add(key)
            for p, origin in staged.entries.items():
                if p and p[0] in taken:
                    self.sources.set(path + p, origin)
