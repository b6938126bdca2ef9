"""JSON Schema errors as located, human messages — one per problem, at the node that is wrong.

A JSON Schema validator speaks in keywords (`additionalProperties` failed for 'momemtum')
and repeats itself under `anyOf` and `if`/`then`. This module turns each error into a
`Diagnostic` at the key or value to fix, in the user's words, with a did-you-mean, and keeps
only the most telling error for each value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from dsl.language import sections
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.schema import resolve_ref, validator
from dsl.language.suggest import did_you_mean

_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean (true or false)",
    "null": "null",
    "object": "a mapping",
    "array": "a list",
}
# When one value has several errors, the lower rank is the one reported.
_RANK = {"type": 0, "enum": 1, "const": 1, "anyOf": 2, "oneOf": 2}
_LIST_LIMIT = 15


def validate_tree(tree: Any, sources: SourceMap) -> list[Diagnostic]:
    """Every schema problem of `tree`, located with `sources`, best first per value, sorted."""
    found: list[tuple[int, JsonPath, Diagnostic]] = []
    for error in validator().errors(tree):
        found.extend(_explain(error, sources))
    return _best_per_value(found)


def _best_per_value(found: list[tuple[int, JsonPath, Diagnostic]]) -> list[Diagnostic]:
    by_value: dict[JsonPath, list[tuple[int, Diagnostic]]] = defaultdict(list)
    for rank, path, diagnostic in found:
        by_value[path].append((rank, diagnostic))
    kept: list[Diagnostic] = []
    for items in by_value.values():
        best = min(rank for rank, _ in items)
        candidates = [d for rank, d in items if rank == best]
        # The same problem seen through two schemas (a union and its branch): keep the
        # message with a suggestion, else the most specific (shortest) one.
        kept.append(min(candidates, key=lambda d: ("did you mean" not in d.message, len(d.message))))
    # A value that has the wrong type makes every error below it noise.
    wrong_type = {d.path for d in kept if d.message.startswith("expected ")}
    kept = [d for d in kept if not any(_below(d.path, p) for p in wrong_type)]
    return sorted(kept, key=lambda d: (d.file, d.line, d.col, d.path))


def _below(path: str, parent: str) -> bool:
    return path != parent and path.startswith((parent + ".", parent + "["))


def _explain(error: Any, sources: SourceMap) -> list[tuple[int, JsonPath, Diagnostic]]:
    """(rank, value path, diagnostic) for one validation error."""
    path: JsonPath = tuple(error.absolute_path)
    kind = error.validator
    instance = error.instance
    rank = _RANK.get(kind, 3)

    def at_value(message: str) -> list[tuple[int, JsonPath, Diagnostic]]:
        return [(rank, path, sources.diagnostic(path, message))]

    if kind == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        extras = [k for k in instance if k not in allowed]
        return [(rank, path + (k,), _unknown_key(path, k, instance, allowed, sources)) for k in extras]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in instance]
        return [(rank, path + (k,), _missing_key(path, k, error.schema, sources)) for k in missing]
    if kind in ("anyOf", "oneOf"):
        return _explain_alternatives(error, sources)
    if kind == "type":
        return at_value(f"expected {describe_types(error.validator_value)}, got {show(instance)}")
    if kind == "enum":
        return at_value(_enum_message(path, instance, error.validator_value))
    if kind == "const":
        return at_value(f"expected {_literal(error.validator_value)}, got {show(instance)}")
    return at_value(_bound_message(kind, error.validator_value, instance, error.message))


def _unknown_key(path: JsonPath, key: str, instance: dict[str, Any], allowed: list[str], sources: SourceMap) -> Diagnostic:
    message = f"unknown key {key!r}"
    if isinstance(instance.get("type"), str) and path:
        owner = _section_kind(path) or str(path[-1])
        message = f"unknown parameter {key!r} of {owner} type {instance['type']!r}"
    hint = did_you_mean(key, allowed) or (f"; allowed: {_names(allowed)}" if allowed else "")
    where = sources.locate(path + (key,), key=True)
    return Diagnostic.at(where, path + (key,), message + _inherited(path, where, sources) + hint)


def _inherited(path: JsonPath, where: Any, sources: SourceMap) -> str:
    """For a key a base file wrote (kept by `extends`) under a section whose `type` the pipeline's own
    file or `--set` changed: where it came from and how to replace the section instead. A key of
    the pipeline's own file under a type it inherits is the user's own mistake: no such hint."""
    typed = sources.get(path + ("type",))
    if typed is None or typed.value.file == where.file or not path:
        return ""
    if typed.value.file != "<--set>" and (typed.value.file != sources.root.file or where.file == sources.root.file):
        return ""
    section = ".".join(str(p) for p in path)
    if typed.value.file == "<--set>":
        return (f" (inherited from {where.file}:{where.line}; --set changed only the type: set the whole "
                f"section instead, --set '{section}={{type: ...}}')")
    return (f" (inherited from {where.file}:{where.line}, while the type is set at {typed.value.file}:"
            f"{typed.value.line}; write the whole section there as `{section}: !replace {{type: ...}}` to drop "
            "the inherited keys)")


def _missing_key(path: JsonPath, key: str, schema: dict[str, Any], sources: SourceMap) -> Diagnostic:
    where = sources.locate(path, key=True)
    if key == "type" and _section_kind(path):
        choices = schema.get("properties", {}).get("type", {}).get("enum", [])
        return Diagnostic.at(where, path + (key,), f"missing `type`; choose one of: {_names(choices)}")
    if not path:
        return Diagnostic.at(where, (key,), f"missing required section `{key}`")
    description = schema.get("properties", {}).get(key, {}).get("description", "")
    extra = f" ({description})" if description else ""
    return Diagnostic.at(where, path + (key,), f"missing required key `{key}`{extra}")


def _section_kind(path: JsonPath) -> str | None:
    """The component kind of the section at `path`: ("network",) -> network, ("callbacks", 2) -> callback."""
    if len(path) == 1 and path[0] in sections.COMPONENT_SECTIONS and path[0] != "callbacks":
        return sections.COMPONENT_SECTIONS[str(path[0])]
    if len(path) == 2 and path[0] == "callbacks" and isinstance(path[1], int):
        return "callback"
    return None


def _enum_message(path: JsonPath, instance: Any, choices: list[Any]) -> str:
    if path == ("version",):
        supported = ", ".join(str(v) for v in sections.SUPPORTED_VERSIONS)
        return f"unsupported version {show_plain(instance)}; supported versions: {supported}"
    if path and path[-1] == "type" and _section_kind(path[:-1]):
        kind = _section_kind(path[:-1])
        hint = did_you_mean(instance, choices) or f"; known types: {_names(choices)}"
        return f"unknown {kind} type {show_plain(instance)}{hint}"
    hint = did_you_mean(instance, choices)
    return f"expected one of {_names(choices, quote=True)}, got {show(instance)}{hint}"


def _explain_alternatives(error: Any, sources: SourceMap) -> list[tuple[int, JsonPath, Diagnostic]]:
    """anyOf/oneOf: explain the one alternative of the right type, else list what is accepted."""
    path: JsonPath = tuple(error.absolute_path)
    alternatives: dict[int, list[Any]] = defaultdict(list)
    for sub in error.context:
        alternatives[sub.relative_schema_path[0]].append(sub)
    alternatives_schemas = error.validator_value
    viable = [
        index
        for index in range(len(alternatives_schemas))
        if not any(sub.validator == "type" and not sub.relative_path for sub in alternatives.get(index, []))
    ]
    expected = " or ".join(describe(s) for s in alternatives_schemas)
    if len(viable) == 1 and viable[0] in alternatives:
        subs = alternatives[viable[0]]
        if all(sub.relative_path for sub in subs):  # the problem is inside: explain it there
            found: list[tuple[int, JsonPath, Diagnostic]] = []
            for sub in subs:
                found.extend(_explain(sub, sources))
            return found
        choices = [c for s in alternatives_schemas for c in resolve_ref(s).get("enum", [])]
        hint = did_you_mean(error.instance, choices)
        message = f"expected {expected}, got {show(error.instance)}{hint}"
        return [(2, path, sources.diagnostic(path, message))]
    if error.validator == "oneOf" and not error.context:
        message = f"matches more than one of: {expected}"
    elif error.context and all(sub.validator == "required" and not sub.relative_path for sub in error.context):
        message = f"needs {expected}"
    else:
        message = f"expected {expected}, got {show(error.instance)}"
    return [(2, path, sources.diagnostic(path, message))]


# What a bound, a length, a pattern... says when the value breaks it; `plain` is the value as written.
_BROKEN: dict[str, str] = {
    "minimum": "must be at least {limit}, got {plain}",
    "maximum": "must be at most {limit}, got {plain}",
    "exclusiveMinimum": "must be greater than {limit}, got {plain}",
    "exclusiveMaximum": "must be less than {limit}, got {plain}",
    "maxLength": "has more than {limit} characters",
    "pattern": "{plain} does not match the required pattern {limit}",
    "uniqueItems": "items must be unique",
    "multipleOf": "must be a multiple of {limit}, got {plain}",
    "not": "{plain} is not allowed here",
    "False": "no value is allowed here",
}


def _bound_message(kind: str, limit: Any, instance: Any, fallback: str) -> str:
    if kind in _BROKEN:
        return _BROKEN[kind].format(limit=limit, plain=show_plain(instance))
    if kind == "minItems":
        return f"needs at least {limit} item{'s' if limit != 1 else ''}, got {len(instance)}"
    if kind in ("maxItems", "items"):
        if kind == "items" and limit is not False:
            return fallback
        return f"has too many items ({len(instance)})" + (f"; at most {limit}" if kind == "maxItems" else "")
    if kind == "minLength":
        return f"needs at least {limit} character{'s' if limit != 1 else ''}, got {show(instance)}"
    return fallback


def describe_types(types: Any) -> str:
    names = [types] if isinstance(types, str) else list(types)
    return " or ".join(_TYPE_NAMES.get(t, t) for t in names)


def describe(schema: Any) -> str:
    """A short phrase for what a schema accepts: "an integer from 0 to 100", "one of 'a', 'b'"."""
    schema = resolve_ref(schema) if isinstance(schema, dict) else schema
    if schema is True or schema == {}:
        return "any value"
    if schema is False:
        return "nothing"
    if "enum" in schema:
        values = schema["enum"]
        return _literal(values[0]) if len(values) == 1 else f"one of {_names(values, quote=True)}"
    if "const" in schema:
        return _literal(schema["const"])
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(describe(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if "type" not in schema:
        if schema.get("description"):
            return str(schema["description"])
        if schema.get("required"):
            return "a mapping with " + " and ".join(f"`{k}`" for k in schema["required"])
        return "any value"
    text = describe_types(schema["type"])
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        text += f" from {low} to {high}"
    elif low is not None:
        text += f" >= {low}"
    elif high is not None:
        text += f" <= {high}"
    return text


def show(value: Any) -> str:
    """A value with its YAML type, for "got ..." messages: 'abc' (string), 3 (integer), a list."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (boolean)"
    if isinstance(value, int):
        return f"{value} (integer)"
    if isinstance(value, float):
        return f"{value} (number)"
    if isinstance(value, str):
        return f"{value!r} (string)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def show_plain(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)


def _literal(value: Any) -> str:
    return show_plain(value)


def _names(values: Iterable[Any], quote: bool = False) -> str:
    items = [show_plain(v) if quote else str(v) for v in values]
    if len(items) > _LIST_LIMIT:
        items = items[:_LIST_LIMIT] + [f"... ({len(items) - _LIST_LIMIT} more)"]
    return ", ".join(items) if items else "(none registered)"
