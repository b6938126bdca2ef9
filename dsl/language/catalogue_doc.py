"""The component catalogue for people: `dslrun list` and docs/components.md.

Both are rendered from the generated JSON Schema, the same source editors and the
validator read, so a parameter's type, default and description are written once (in the
component's `params`) and shown identically everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsl.language import registry
from dsl.language.schema import pipeline_schema, resolve_ref

# The sections `dslrun list KIND` accepts, in the order the catalogue shows them.
SECTIONS = ("pipeline", "runner", *registry.KINDS)
_ALIASES = {f"{kind}s": kind for kind in registry.KINDS} | {"callbacks": "callback", "top": "pipeline"}


@dataclass(frozen=True)
class Parameter:
    """One row of the catalogue."""

    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Entry:
    """One component type (or the top level, or the runner) with its parameters."""

    section: str
    name: str
    description: str
    parameters: list[Parameter]


def normalise_section(name: str) -> str | None:
    """'networks' -> 'network'; None when it is no section."""
    name = name.strip().lower()
    name = _ALIASES.get(name, name)
    return name if name in SECTIONS else None


def entries(section: str | None = None) -> list[Entry]:
    """The catalogue (of one section), in catalogue order."""
    schema = pipeline_schema()
    defs = schema["$defs"]
    found: list[Entry] = []
    for current in SECTIONS if section is None else (section,):
        if current == "pipeline":
            top = {k: v for k, v in schema["properties"].items() if "$ref" not in v and k != "callbacks"}
            found.append(Entry("pipeline", "top level", schema["description"], _rows(top, set(schema["required"]))))
        elif current == "runner":
            runner = defs["runner"]
            found.append(Entry("runner", "runner", runner["description"], _rows(runner["properties"], set())))
        else:
            for component in registry.components(current):
                definition = defs[f"{current}.{component.type}"]
                properties = {k: v for k, v in definition["properties"].items() if k != "type"}
                description = component.description + _former_names(component)
                found.append(Entry(current, component.type, description, _rows(properties, set(definition["required"]))))
    return found


def _former_names(component: registry.Component) -> str:
    """' Formerly `eval_basic` (still accepted, with a warning).' for a renamed type."""
    if not component.aliases:
        return ""
    names = " or ".join(f"`{name}`" for name in component.aliases)
    return f" Formerly {names} (still accepted, with a warning)."


def _rows(
    properties: dict[str, Any], required: set[str], prefix: str = "", by_type: dict[str, Any] | None = None
) -> list[Parameter]:
    """One row per parameter, then a row per key of each mapping parameter (`save_best.monitor`).

    `by_type` holds, for a mapping whose `type` decides its keys (optimizer, lr_schedule),
    each type's own branch, so a key without one shared default shows each type's.
    """
    rows = []
    for name, prop in properties.items():
        prop = resolve_ref(prop) if "$ref" in prop and len(prop) == 1 else prop
        if name in required:
            default = "required"
        elif "default" in prop:
            default = format_value(prop["default"])
        else:
            default = _defaults_by_type(name, by_type or {})
        rows.append(Parameter(prefix + name, type_text(prop), default, " ".join(prop.get("description", "").split())))
        nested = prop.get("properties")
        kinds = prop.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds or []
        if isinstance(nested, dict) and "object" in kinds:
            rows.extend(_rows(nested, set(prop.get("required", [])), prefix + name + ".", _type_branches(prop)))
    return rows


def _type_branches(schema: dict[str, Any]) -> dict[str, Any]:
    """{type name: the `then` schema applied when `type` is that name} of a typed mapping."""
    branches = {}
    for rule in schema.get("allOf", []):
        const = rule.get("if", {}).get("properties", {}).get("type", {}).get("const")
        if isinstance(const, str) and isinstance(rule.get("then"), dict):
            branches[const] = rule["then"]
    return branches


def _defaults_by_type(key: str, branches: dict[str, Any]) -> str:
    """`0.9 (momentum, nesterov), 0.0 (rmsprop)`: the default each type gives `key` ("" when none does)."""
    grouped: dict[str, list[str]] = {}
    for type_name, branch in branches.items():
        prop = branch.get("properties", {}).get(key)
        if prop is None:
            continue
        if key in branch.get("required", []):
            grouped.setdefault("required", []).append(type_name)
        elif "default" in prop:
            grouped.setdefault(format_value(prop["default"]), []).append(type_name)
    return ", ".join(f"{value} ({', '.join(names)})" for value, names in grouped.items())


def format_value(value: Any) -> str:
    """A default as YAML flow text: null, true, 0.1, [128], relu, {type: none}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value) if value == "" or value.strip() != value else value
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def type_text(schema: Any) -> str:
    """What a parameter accepts, in a few words: "integer >= 1", "one of: relu, gelu"."""
    if not isinstance(schema, dict):
        return "any" if schema is True else "nothing"
    schema = resolve_ref(schema) if "$ref" in schema else schema
    if "const" in schema:
        return format_value(schema["const"])
    if "enum" in schema:
        return "one of: " + ", ".join(format_value(v) for v in schema["enum"])
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            return " or ".join(type_text(s) for s in schema[keyword])
    kinds = schema.get("type", "any")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    words = []
    for kind in kinds:
        if kind == "array":
            words.append(_array_text(schema))
        elif kind == "object":
            words.append("mapping")
        else:
            words.append(kind + _bounds(schema) if kind in ("integer", "number") else kind)
    return " or ".join(words)


def _array_text(schema: dict[str, Any]) -> str:
    if "prefixItems" in schema:
        return "list of [" + "; ".join(type_text(s) for s in schema["prefixItems"]) + "]"
    items = schema.get("items")
    return f"list of {type_text(items)}" if isinstance(items, dict) else "list"


def _bounds(schema: dict[str, Any]) -> str:
    parts = []
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
        if key in schema:
            parts.append(f"{sign} {schema[key]}")
    return (" " + ", ".join(parts)) if parts else ""


def render_text(section: str | None = None) -> str:
    """The catalogue for a terminal: each type, then its parameters indented."""
    lines: list[str] = []
    for title, group in _grouped(section):
        lines.append(f"{title}:")
        if not group:
            lines.append("  (no types registered)")
        # Parameters every type of the kind takes (a callback's priority) are shown once, not per type.
        shared = set(registry.kind_params(group[0].section)) if group and group[0].section in registry.KINDS else set()
        if shared:
            lines.append("  every type also takes:")
            lines += _parameter_lines([p for p in group[0].parameters if p.name in shared], "    ")
        for entry in group:
            lines.append(f"  {entry.name} - {entry.description}" if entry.section not in ("pipeline", "runner") else f"  {entry.description}")
            lines += _parameter_lines([p for p in entry.parameters if p.name not in shared], "      ")
        lines.append("")
    return "\n".join(lines)


def _parameter_lines(parameters: list[Any], indent: str) -> list[str]:
    lines = []
    for p in parameters:
        default = f" = {p.default}" if p.default and p.default != "required" else (" (required)" if p.default else "")
        lines.append(f"{indent}{p.name}: {p.type}{default}")
        if p.description:
            lines.append(f"{indent}    {p.description}")
    return lines


def render_markdown() -> str:
    """docs/components.md: every section, type and parameter, as Markdown tables."""
    out = [
        "# Pipeline reference",
        "",
        "<!-- Generated by `dslrun list --markdown` from the component registry; do not edit by hand. -->",
        "",
        "A pipeline is a YAML file with the sections below. Each component section picks a `type`;",
        "the other keys of the section are that type's parameters. Omitted parameters take the default",
        "shown (`dslrun show FILE` prints the pipeline with every default filled in).",
        "",
        *_LANGUAGE_RULES,
    ]
    for title, group in _grouped(None):
        out += [f"## {title}", ""]
        if not group:
            out += ["No types are registered.", ""]
        for entry in group:
            if entry.section not in ("pipeline", "runner"):
                out += [f"### `{entry.name}`", ""]
            out += [_md(entry.description), ""]
            if entry.parameters:
                out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
                for p in entry.parameters:
                    default = f"`{_md_code(p.default)}`" if p.default and p.default != "required" else p.default
                    out.append(f"| `{p.name}` | {_md(p.type)} | {default} | {_md(p.description)} |")
                out.append("")
            else:
                out += ["No parameters.", ""]
    return "\n".join(out).rstrip("\n") + "\n"


_LANGUAGE_RULES = [
    "## Language rules",
    "",
    "- **YAML subset.** Mappings, lists, strings, numbers, booleans and null. Tags such as",
    "  `!!python/object` are errors. Anchors, aliases and merge keys (`<<: *base`) work; dates stay",
    "  text; `1e-4` is a number; keys are the text written (`on:` is the key `on`). Duplicate keys,",
    "  tabs in indentation, non-UTF-8 bytes and files over 1 MiB are errors.",
    "- **`extends`** (a file or a list, relative to the extending file) is applied first: mappings are",
    "  deep-merged, the extending file wins; lists and scalars are replaced whole. A mapping with another",
    "  `type:` than the base's replaces it whole (`network: {type: embedding_bag}` over a `text_cnn`",
    "  keeps none of its keys), and so does one tagged `!replace` (`optimizer: !replace {type: adam}`).",
    "  A list tagged `!append` goes after the base's (`callbacks: !append [{type: mlflow}]`); one tagged",
    "  `!merge` merges each component into the base's item of its `type` and adds the others (an item",
    "  `!remove {type: init_checkpoint}` takes the base's item of that type out); a plain list",
    "  that drops some of the base's components gets a warning naming them, which `!replace` on the list",
    "  silences. These are the tags a pipeline may use (editors: yaml-language-server's `yaml.customTags:",
    "  [\"!replace mapping\", \"!replace sequence\", \"!append sequence\", \"!merge sequence\",",
    "  \"!remove mapping\"]`).",
    "- **`${NAME}` / `${NAME:-default}`** in string values are then replaced from the environment",
    "  (`$${` writes `${`). A value that is exactly one reference is read as YAML, so",
    "  `max_epochs: ${EPOCHS:-10}` is the number 10; inside other text the result is a string.",
    "  An unset variable without a default is an error.",
    "- **`--set path=value`** overrides come last, in order (`runner.max_epochs=2`,",
    "  `callbacks[0].every_n_epochs=5` or `callbacks.0.every_n_epochs=5`). The value is YAML; it is",
    "  not substituted. A key the file omits may be set when the schema allows it there.",
    "- **Defaults** are filled from the tables below; a missing `name` is the file name without",
    "  extension, and `runner.model_dir: null` becomes `runs/<name>`.",
    "- **Cross-section rules:** exactly one of `runner.max_epochs` / `runner.max_iters`; the",
    "  workflow has a train phase, and each of its modes has data in the inputter; `num_classes`",
    "  and `image_shape` agree between inputter and network when both give them; a `piecewise`",
    "  learning-rate schedule has strictly increasing boundaries and one more value than",
    "  boundaries; a callback marked unique (e.g. `checkpoint`) appears at most once.",
    "- **Phase outputs:** every output a section reads (`checkpoint.save_best.monitor`,",
    "  `early_stopping.monitor`, the printing callbacks) must be produced by a phase the workflow",
    "  runs: the modeler declares `loss`, `accuracy`, one `top_<k>_accuracy` per `top_k` (and",
    "  `learning_rate` in train), an inputter with `skip_corrupt: true` adds `skipped_examples`.",
    "- **Schedule lengths:** a warmup as long as the run, a piecewise boundary at or after its end,",
    "  or a decay that cannot happen within it is reported; lengths in epochs are compared with",
    "  `runner.max_epochs` here, and with steps per epoch by `dslrun validate --data`.",
    "",
]


def _grouped(section: str | None) -> Iterator[tuple[str, list[Entry]]]:
    titles = {"pipeline": "Top level", "runner": "runner", "callback": "callbacks (a list of)"}
    all_entries = entries(section)
    for current in SECTIONS if section is None else (section,):
        group = [e for e in all_entries if e.section == current]
        yield titles.get(current, current), group


def _md_code(text: str) -> str:
    return text.replace("|", "\\|")


def _md(text: str) -> str:
    """Text safe in a Markdown table cell (`runs/<name>` must not become an HTML tag)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")
