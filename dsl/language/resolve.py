"""From files to one tree: `extends`, `${ENV}` substitution and `--set` overrides.

The order is fixed and documented:

1. `extends` (a file name or a list, relative to the extending file) is resolved first,
   recursively. Bases are merged in list order, then the extending file on top. Mappings
   are deep-merged (the later one wins key by key); lists and scalars are replaced whole.
   A mapping replaces the base's whole, instead, when it names another `type:` than the
   base's (`network: {type: embedding_bag}` over a text_cnn keeps none of its keys) or is
   tagged `!replace` (`optimizer: !replace {type: adam}` keeps no base key, type or not).
   A list tagged `!append` goes after the base's; one tagged `!merge` merges each component
   into the base's item of its `type` and adds the others.
   The `extends` key itself is removed. Extends paths are taken literally (no `${...}`).
2. `${NAME}` and `${NAME:-default}` are replaced in string values of the merged tree
   (so a value a later file overrides never needs its variables). `$${` writes a literal
   `${`. A value that is exactly one reference is read as a YAML scalar, so
   `max_epochs: ${EPOCHS:-10}` is the integer 10 and `${DEBUG:-false}` a boolean; a
   reference inside other text (`data/${SPLIT}.csv`) gives a string. Keys are never
   substituted. An unset variable without a default is an error.
3. `--set path=value` overrides are applied in order; the value is parsed as YAML with
   the same rules as files, and is not substituted (the shell already expanded it).
   A path may name a key the tree lacks only when the schema allows that key there.

Every value keeps the position it was written at (file or `<--set>`), so later errors
point at the right place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.language.diagnostics import Diagnostic, Location, Origin, SourceMap, format_path
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.loader import Append, LoadError, MergeList, Remove, Replace, ReplaceList, load_file, parse_text
from dsl.language.secrets import is_secret, remember
from dsl.language.suggest import did_you_mean

SET_FILE = "<--set>"


@dataclass
class Tree:
    """A pipeline tree being resolved, with where each value came from."""

    value: dict[str, Any] | None
    sources: SourceMap
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # A base file could not be merged: the tree lacks what it would have given, so schema
    # errors about missing keys would only be noise.
    incomplete: bool = False


# ---------------------------------------------------------------------------- extends


def load_tree(path: str | Path) -> Tree:
    """Load `path` and every file it extends, merged; `extends` removed."""
    diagnostics: list[Diagnostic] = []
    display = str(path)
    loaded = _load_extending(Path(path), display, [], diagnostics)
    if loaded is None:
        return Tree(None, SourceMap(root=Location(display)), diagnostics)
    value, sources, complete = loaded
    diagnostics.extend(_stray_removals(value, (), sources))
    return Tree(plain(value), sources, diagnostics, incomplete=not complete)


def _stray_removals(value: Any, path: JsonPath, sources: SourceMap) -> list[Diagnostic]:
    """An error at each `!remove` item left after every merge: no base file had a list to take it from."""
    if isinstance(value, Remove):
        return [sources.diagnostic(path, (
            f"!remove {{type: {value.get('type')}}}: there is no inherited list to take it out of; !remove works in a "
            "!merge list of a file that `extends` the one that lists it"))]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [found for key, item in items for found in _stray_removals(item, path + (key,), sources)]


def _load_extending(
    path: Path, display: str, chain: list[tuple[Path, str]], diagnostics: list[Diagnostic]
) -> tuple[dict[str, Any], SourceMap, bool] | None:
    """(merged value, positions, whether every base was merged), or None when `path` failed."""
    try:
        document = load_file(path, display)
    except LoadError as exc:
        diagnostics.extend(exc.diagnostics)
        return None
    diagnostics.extend(document.diagnostics)
    value, sources = document.value, document.sources
    if "extends" not in value:
        return value, sources, True
    names = value.pop("extends")
    chain = chain + [(_identity(path), display)]
    merged: tuple[dict[str, Any], SourceMap] | None = None
    merged_from: list[str] = []  # the bases merged so far, as `extends` names them
    entries = _extends_entries(names, sources, diagnostics)
    complete = bool(entries)
    for index, name, where in entries:
        base_display = os.path.normpath(os.path.join(os.path.dirname(display), name))
        base_path = path.parent / name
        shown = " → ".join([d for _, d in chain] + [base_display])
        if _identity(base_path) in [p for p, _ in chain]:
            diagnostics.append(Diagnostic.at(where, _extends_path(names, index), f"extends cycle: {shown}"))
            complete = False
            continue
        if base_path.suffix.lower() not in (".yaml", ".yml"):
            # A pipeline only extends pipelines: never make dslrun read (and quote in its
            # errors) some other file a hostile or mistaken `extends` names.
            diagnostics.append(
                Diagnostic.at(
                    where,
                    _extends_path(names, index),
                    f"base file {name!r} is not a pipeline: extends names .yaml or .yml files only",
                )
            )
            complete = False
            continue
        if not base_path.is_file():
            what = "is a directory" if base_path.is_dir() else "not found"
            diagnostics.append(
                Diagnostic.at(
                    where,
                    _extends_path(names, index),
                    f"base file {name!r} {what} (looked for {base_display}; chain: {shown}); "
                    f"extends paths are relative to the file that names them{_shipped(name, path)}",
                )
            )
            complete = False
            continue
        base = _load_extending(base_path, base_display, chain, diagnostics)
        if base is None:
            complete = False
            continue
        complete = complete and base[2]
        # A pipeline's name is its own (its run directory, runs/<name>, its MLflow experiment): a file
        # without one is named after itself, never after its base, or two variants share a run directory.
        # Its description too: every variant of a trial called itself "ResNet-20, 3 epochs on ...".
        for own in ("name", "description"):
            base[0].pop(own, None)
            base[1].remove_under((own,))
        if merged is not None:
            diagnostics.extend(dropped_components(merged, base[:2], merged_from) + merge_problems(merged, base[:2]))
        merged = base[:2] if merged is None else merge(merged, base[:2])
        merged_from.append(name)
    sources.remove_under(("extends",))
    if merged is not None:
        diagnostics.extend(dropped_components(merged, (value, sources), merged_from)
                           + merge_problems(merged, (value, sources)))
    value, sources = (value, sources) if merged is None else merge(merged, (value, sources))
    return value, sources, complete


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _extends_entries(names: Any, sources: SourceMap, diagnostics: list[Diagnostic]) -> list[tuple[int, str, Location]]:
    """(index, file name, position) for each entry of an `extends` value; errors for bad ones."""
    if isinstance(names, str):
        return [(0, names, sources.locate(("extends",)))]
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return [(i, n, sources.locate(("extends", i))) for i, n in enumerate(names)]
    diagnostics.append(
        sources.diagnostic(("extends",), "expected a file name or a list of file names")
    )
    return []


# The pipelines shipped beside the package (a clone or an editable install; a wheel has none).
SHIPPED = Path(__file__).resolve().parents[2] / "pipelines"


def _shipped(name: str, extending: Path) -> str:
    """`; the shipped ... is <path>` when a shipped pipeline bears the missing base's file name: trial
    A16 wrote `extends: detection.yaml` in a folder of its own, as the docs' examples read."""
    shipped = SHIPPED / Path(name).name
    if not shipped.is_file():
        return ""
    relative = os.path.relpath(shipped, extending.resolve().parent)
    return f"; did you mean the shipped one? extends: {min(relative, str(shipped), key=len)}"


def _extends_path(names: Any, index: int) -> JsonPath:
    return ("extends", index) if isinstance(names, list) else ("extends",)


def merge(base: tuple[dict[str, Any], SourceMap], over: tuple[dict[str, Any], SourceMap]) -> tuple[dict[str, Any], SourceMap]:
    """Deep-merge two located trees; `over` wins. Positions follow the value that was kept."""
    value = _merge_values(base[0], over[0])
    sources = SourceMap(root=over[1].root)
    _collect_sources(value, (), base[1], _after_base_items(base[0], over[0], over[1]), sources)
    return _drop_removed(value, (), sources), sources


class _Removed:
    """Where a `!remove` item met its base item in a merged list, until `_drop_removed` takes it out."""


REMOVED = _Removed()


def _drop_removed(value: Any, path: JsonPath, sources: SourceMap) -> Any:
    """`value` without the items `!remove` took out of its lists, and `sources` moved to match:
    the items after one taken out keep their own lines at their new indices."""
    if isinstance(value, dict):
        out = type(value)()
        for key, item in value.items():
            out[key] = _drop_removed(item, path + (key,), sources)
        return out
    if not isinstance(value, list):
        return value
    kept = [index for index, item in enumerate(value) if item is not REMOVED]
    if len(kept) < len(value):
        new_index = {old: new for new, old in enumerate(kept)}
        moved: dict[JsonPath, Origin] = {}
        for at, origin in sources.entries.items():
            if len(at) > len(path) and at[:len(path)] == path and isinstance(at[len(path)], int):
                index = at[len(path)]
                if index not in new_index:
                    continue
                at = (*path, new_index[index], *at[len(path) + 1:])
            moved[at] = origin
        sources.entries = moved
    return type(value)(_drop_removed(value[old], path + (new,), sources) for new, old in enumerate(kept))


def _merge_values(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict) and not replaces(base, over):
        out = dict(base)
        for key, item in over.items():
            out[key] = _merge_values(base[key], item) if key in base else item
        return out
    if isinstance(over, Append):  # its items after the base's (a base without a list: they are the list)
        return [*base, *over] if isinstance(base, list) else list(over)
    if isinstance(over, MergeList) and isinstance(base, list):
        items = list(base)
        for index, item in zip(_placed(base, over), over):
            if index is not None and index < len(base):
                items[index] = REMOVED if isinstance(item, Remove) else _merge_values(base[index], item)
            elif index is not None:
                items.append(item)
        return items
    return over


def _same_type(base: list[Any], item: Any) -> list[int]:
    """The indices of the base items of `item`'s component type."""
    kind = item.get("type") if isinstance(item, dict) else None
    return [i for i, b in enumerate(base) if kind is not None and isinstance(b, dict) and b.get("type") == kind]


def _placed(base: list[Any], over: list[Any]) -> list[int | None]:
    """Where each item of a `!merge` list lands: on the one base item of its type, else after the base's;
    nowhere (None) for a `!remove` that does not name one base item (merge_problems says so)."""
    places: list[int | None] = []
    added = len(base)
    for item in over:
        matches = _same_type(base, item)
        if len(matches) == 1:
            places.append(matches[0])
        elif isinstance(item, Remove):
            places.append(None)
        else:
            places.append(added)
            added += 1
    return places


def _moved(base: Any, over: Any, path: JsonPath = ()) -> dict[JsonPath, list[int | None]]:
    """Each `!append` or `!merge` list of `over` over a base list: its path -> each item's index in the merged list."""
    if isinstance(over, Append):
        return {path: [len(base) + i for i in range(len(over))]} if isinstance(base, list) else {}
    if isinstance(over, MergeList):
        return {path: _placed(base, over)} if isinstance(base, list) else {}
    if isinstance(base, dict) and isinstance(over, dict) and not replaces(base, over):
        found: dict[JsonPath, list[int | None]] = {}
        for key, item in over.items():
            if key in base:
                found.update(_moved(base[key], item, path + (key,)))
        return found
    return {}


def _after_base_items(base: Any, over: Any, sources: SourceMap) -> SourceMap:
    """`over`'s positions with each appended or merged item moved to its index in the merged list."""
    shifts = _moved(base, over)
    if not shifts:
        return sources
    moved = SourceMap(root=sources.root)
    for path, origin in sources.entries.items():
        place: int | None = -1
        for at, places in shifts.items():
            if len(path) > len(at) and path[:len(at)] == at and isinstance(path[len(at)], int):
                index = path[len(at)]
                assert isinstance(index, int)
                place = places[index]
                path = (*at, place, *path[len(at) + 1:]) if place is not None else path
                break
        if place is not None:  # an item that lands nowhere keeps no position in the merged tree
            moved.set(path, origin)
    return moved


def merge_problems(base: tuple[dict[str, Any], SourceMap], over: tuple[dict[str, Any], SourceMap]) -> list[Diagnostic]:
    """An error at each `!merge` item whose type the base lists several times: which one it changes
    cannot be told (list that callback whole under `!replace`)."""
    found: list[Diagnostic] = []

    def walk(b: Any, o: Any, path: JsonPath) -> None:
        if isinstance(b, dict) and isinstance(o, dict) and not replaces(b, o):
            for key, item in o.items():
                if key in b:
                    walk(b[key], item, path + (key,))
        elif isinstance(o, MergeList) and isinstance(b, list):
            for index, item in enumerate(o):
                matches = _same_type(b, item)
                if isinstance(item, Remove) and not matches:
                    listed = ", ".join(str(x.get("type")) for x in b if isinstance(x, dict)) or "nothing"
                    found.append(over[1].diagnostic(path + (index,), (
                        f"!remove {{type: {item.get('type')}}}: the base's {format_path(path)} has no "
                        f"{item.get('type')} to take out (it lists {listed})")))
                if len(matches) > 1:
                    where = base[1].locate(path + (matches[0],))
                    found.append(over[1].diagnostic(path + (index,), (
                        f"!merge cannot tell which of the base's {len(matches)} {item['type']} items this changes "
                        f"(the first at {where.file}:{where.line}); list them whole under `!replace`")))

    walk(base[0], over[0], ())
    return found


def dropped_components(base: tuple[dict[str, Any], SourceMap], over: tuple[dict[str, Any], SourceMap],
                       base_names: list[str]) -> list[Diagnostic]:
    """A warning at each plain list of `over` that replaces a base list of components and drops
    some of their types: forgetting `!append` under `callbacks` silently lost an `init_checkpoint`
    (a new user's fine-tuning trained from scratch). `!replace` on the list says it is meant.

    It names the list replaced by the file `extends` names (`base_names`), and where each dropped
    item was written, which may be a file further up the chain (trial B9 read a grandparent's line
    as the list replaced)."""
    found: list[Diagnostic] = []
    _find_dropped(base[0], over[0], (), (base[1], " and ".join(base_names)), over[1], found)
    return found


def _find_dropped(base: Any, over: Any, path: JsonPath, origin: tuple[SourceMap, str], sources: SourceMap,
                  found: list[Diagnostic]) -> None:
    if isinstance(base, dict) and isinstance(over, dict) and not replaces(base, over):
        for key, item in over.items():
            if key in base:
                _find_dropped(base[key], item, path + (key,), origin, sources, found)
        return
    if not isinstance(base, list) or not isinstance(over, list) or isinstance(over, (Append, ReplaceList, MergeList)):
        return
    kept = {item.get("type") for item in over if isinstance(item, dict)}
    dropped = [(index, item["type"]) for index, item in enumerate(base)
               if isinstance(item, dict) and isinstance(item.get("type"), str) and item["type"] not in kept]
    if not dropped:
        return
    base_sources, base_name = origin
    places: dict[str, str] = {}
    for index, kind in dropped:
        where = base_sources.locate(path + (index,))
        places.setdefault(kind, f"{where.file}:{where.line}")
    names = ", ".join(f"{kind} ({place})" for kind, place in places.items())
    key = path[-1] if path and isinstance(path[-1], str) else format_path(path)
    found.append(Diagnostic.at(
        sources.locate(path, key=True), path,
        f"this list replaces the whole `{format_path(path)}` list inherited from {base_name} and drops its {names}; "
        f"write `{key}: !append [...]` to add to the inherited list, or `{key}: !replace [...]` to drop them on purpose",
        "warning"))


def replaces(base: dict[str, Any], over: dict[str, Any]) -> bool:
    """Whether `over` takes the place of `base` whole: tagged `!replace`, or another component
    `type` (the base's parameters belong to its type, not to the new one)."""
    if isinstance(over, Replace):
        return True
    return "type" in base and "type" in over and base["type"] != over["type"]


def plain(value: Any) -> Any:
    """`value` with every `!replace` mapping and `!append` list made plain (they mean nothing after the merge)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _collect_sources(value: Any, path: JsonPath, base: SourceMap, over: SourceMap, out: SourceMap) -> None:
    origin = over.get(path) or base.get(path)
    if origin is not None:
        out.set(path, origin)
    if isinstance(value, dict):
        for key, item in value.items():
            _collect_sources(item, path + (key,), base, over, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _collect_sources(item, path + (index,), base, over, out)


# ---------------------------------------------------------------------------- ${ENV}

_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


def substitute_env(tree: Tree, environ: Mapping[str, str]) -> None:
    """Replace `${NAME}` / `${NAME:-default}` in every string value of `tree`, in place."""
    if tree.value is not None:
        tree.value = _substitute(tree.value, (), tree, environ)


def _substitute(value: Any, path: JsonPath, tree: Tree, environ: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, path + (k,), tree, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, path + (i,), tree, environ) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:
        return _substitute_string(value, path, tree, environ)
    return value


def _substitute_string(text: str, path: JsonPath, tree: Tree, environ: Mapping[str, str]) -> Any:
    problems: list[str] = []
    kept: list[str] = []  # the text as dslrun writes it: credentials kept as references (dsl.language.secrets)

    def replace(match: re.Match[str]) -> str:
        found = _replace(match)
        secret = match.group(1) is not None and match.group(1) in environ and is_secret(
            match.group(1), text, match.start(), match.end())
        kept.append(match.group(0) if secret or match.group(0) == "$${" else found)
        return found

    def _replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if name is None:
            problems.append(
                f"malformed reference at {text[match.start():match.start() + 20]!r}; "
                "write ${NAME} or ${NAME:-default} (or $${ for a literal ${)"
            )
            return whole
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        problems.append(
            f"environment variable {name} is not set; set it, or give a default: ${{{name}:-value}}"
        )
        return whole

    result = _REFERENCE.sub(replace, text)
    for problem in problems:
        tree.diagnostics.append(tree.sources.diagnostic(path, problem))
    if problems:
        return text
    pieces = iter(kept)
    remember(path, result, _REFERENCE.sub(lambda _: next(pieces), text))
    match = _REFERENCE.fullmatch(text)
    if match and match.group(1):  # exactly one reference: read the result as a YAML scalar
        try:
            parsed = parse_text(result, "<env>").value
        except LoadError:
            return result
        if parsed is None or isinstance(parsed, (str, int, float, bool)):
            return parsed
    return result


# ---------------------------------------------------------------------------- --set

# A list index `[1]`, a quoted key `["network.depth"]` (a key holding dots: a sweep's parameter), a plain key.
_SEGMENT = re.compile(r"""\[(\d+)\]|\[(["'])(.+?)\2\]|([^.\[\]"']+)""")

AllowedKeys = Callable[[Any, JsonPath], "list[str] | None"]


def apply_overrides(tree: Tree, overrides: Sequence[str], allowed_keys: AllowedKeys) -> None:
    """Apply each `path=value` in order; problems become diagnostics at `<--set>:N:col`."""
    for number, text in enumerate(overrides, start=1):
        if tree.value is None:
            return
        problem = _apply_override(tree, number, text, allowed_keys)
        if problem is not None:
            tree.diagnostics.append(problem)


def _parse_segments(path_text: str) -> list[tuple[str | int, int]] | None:
    """'callbacks[1].every' -> [('callbacks', 0), (1, 9), ('every', 13)] (0-based columns);
    'sweep.parameters["network.depth"].values' keeps the quoted key whole."""
    segments: list[tuple[str | int, int]] = []
    position = 0
    expect_name = True
    while position < len(path_text):
        if path_text[position] == "." and not expect_name:
            position += 1
            expect_name = True
            continue
        match = _SEGMENT.match(path_text, position)
        if match is None or (match.group(4) is not None and not expect_name):
            return None
        if match.group(1) is not None:
            segments.append((int(match.group(1)), match.start()))
        elif match.group(3) is not None:
            segments.append((match.group(3), match.start()))
        else:
            name = match.group(4)
            segments.append((int(name) if name.isdigit() else name, match.start()))
        position = match.end()
        expect_name = False
    return segments if segments and not expect_name else None


def _apply_override(tree: Tree, number: int, text: str, allowed_keys: AllowedKeys) -> Diagnostic | None:
    def problem(col: int, path: JsonPath | str, message: str) -> Diagnostic:
        return Diagnostic.at(Location(SET_FILE, number, col + 1), path, message)

    path_text, equals, value_text = text.partition("=")
    segments = _parse_segments(path_text.strip()) if equals else None
    if segments is None:
        return problem(0, "", f"--set expects PATH=VALUE such as runner.max_epochs=2 or callbacks[0].every_n_epochs=5, got {text!r}")
    if segments[0][0] == "extends":
        return problem(0, "extends", "extends cannot be changed with --set (it is resolved before overrides)")
    value_col = len(path_text) + 1
    try:
        parsed = parse_text(value_text, SET_FILE, line_base=number - 1, col_base=value_col)
    except LoadError as exc:
        return exc.diagnostics[0]
    if parsed.diagnostics:
        return parsed.diagnostics[0]
    value_origin = Origin(Location(SET_FILE, number, value_col + 1))

    container: Any = tree.value
    path: JsonPath = ()
    for index, (segment, col) in enumerate(segments):
        last = index == len(segments) - 1
        if isinstance(container, list):
            if not isinstance(segment, int):
                return problem(col, path, f"{_show(path)} is a list; use an index such as {_show(path)}[0]")
            if segment >= len(container):
                return problem(
                    col, path + (segment,), f"index {segment} is out of range: {_show(path)} has {len(container)} item(s)"
                )
        elif isinstance(container, dict):
            if isinstance(segment, int) and str(segment) not in container:
                return problem(col, path, f"{_show(path)} is a mapping, not a list; it has no item [{segment}]")
            segment = str(segment)
            if segment not in container:
                allowed = allowed_keys(tree.value, path)
                if allowed is not None and segment not in allowed:
                    hint = did_you_mean(segment, allowed) or f"; allowed: {', '.join(allowed)}"
                    where = f"{_show(path)} has" if path else "a pipeline has"
                    return problem(col, path + (segment,), f"no such key: {where} no {segment!r}{hint}")
                if not last and isinstance(segments[index + 1][0], int):
                    whole = _show(path + (segment,))
                    return problem(
                        col,
                        path + (segment,),
                        f"the pipeline does not write this list (its default applies), so it has no item "
                        f"[{segments[index + 1][0]}]; set the whole list instead, e.g. --set '{whole}=[...]'",
                    )
                if not last:
                    container[segment] = {}
                    tree.sources.set(path + (segment,), Origin(value_origin.value, Location(SET_FILE, number, col + 1)))
        else:
            return problem(col, path + (segment,), f"cannot set {segment!r} inside {_show(path)}, which is {_kind(container)}")
        if last:
            container[segment] = parsed.value
            target = path + (segment,)
            tree.sources.remove_under(target)
            tree.sources.graft(target, parsed.sources)
            tree.sources.set(target, Origin(value_origin.value, Location(SET_FILE, number, col + 1)))
            return None
        path = path + (segment,)
        container = container[segment]
    return None


def _show(path: JsonPath) -> str:
    return format_path(path) or "the pipeline"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------- all three


def resolve(
    path: str | Path,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    allowed_keys: AllowedKeys | None = None,
) -> Tree:
    """extends, then ${ENV}, then --set: the merged tree, positions and every problem found."""
    tree = load_tree(path)
    if tree.value is None:
        return tree
    substitute_env(tree, os.environ if environ is None else environ)
    if overrides:
        if allowed_keys is None:
            from dsl.language.schema import allowed_keys as schema_keys

            allowed_keys = schema_keys
        apply_overrides(tree, overrides, allowed_keys)
        tree.value = plain(tree.value)  # `--set 'network=!replace {...}'` replaces anyway
    return tree
