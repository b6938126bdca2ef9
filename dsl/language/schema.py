"""The pipeline's JSON Schema (2020-12), built from the component registry and `dsl.language.sections`
(whose `runner` section holds the settings the registered backends declare).

One schema serves three readers: `dslrun validate` checks files with it, editors use the
committed copy (`schemas/pipeline.schema.json`) for completion and hover text, and the
defaults are read from it. Each component section is a discriminated union on `type`:
`properties.type.enum` lists the registered types (so an unknown type is one clear error)
and one `if type == T then $ref: #/$defs/<kind>.<T>` per type applies that type's
parameters, with unknown keys rejected.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsl.language import registry, sections
from dsl.language.diagnostics import Path as JsonPath

if TYPE_CHECKING:
    from jsonschema import ValidationError

SCHEMA_ID = "https://dslrun.dev/schemas/pipeline.schema.json"

# The language's top-level keys, in the order a pipeline (and `dslrun show`) lists them.
TOP_LEVEL_ORDER = (
    "version",
    "name",
    "description",
    "extends",
    "seed",
    "deterministic",
    "inputter",
    "augmenter",
    "network",
    "modeler",
    "callbacks",
    "runner",
)

_SECTION_TEXT = {
    "inputter": "Where the examples come from and how they are batched; `type` picks the data set reader.",
    "augmenter": "Per-example image transforms (random ones in train mode, normalisation in every mode).",
    "network": "The model: `type` picks the architecture, the other keys size it.",
    "modeler": "Loss, optimizer, learning-rate schedule and metrics.",
    "callback": "One callback: `type` picks it; it runs at the loop's hook points (checkpoints, logs, ...).",
}


@functools.lru_cache(maxsize=1)
def _cached_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    for kind in registry.KINDS:
        for component in registry.components(kind):
            defs[f"{kind}.{component.type}"] = component.schema()
        defs[kind] = _section_union(kind)
    defs["runner"] = {
        "type": "object",
        "description": "How the loop runs: length of training, workflow, backend, run directory, threads.",
        "properties": copy.deepcopy(sections.runner_params()),
        "additionalProperties": False,
    }
    properties: dict[str, Any] = {}
    declared_elsewhere = [key for key in sections.load_sections() if key not in TOP_LEVEL_ORDER]
    for key in (*TOP_LEVEL_ORDER, *declared_elsewhere):
        if key in sections.TOP_LEVEL:
            properties[key] = copy.deepcopy(sections.TOP_LEVEL[key])
        elif key == "callbacks":
            properties[key] = {
                "type": "array",
                "description": "Callbacks run at the loop's hook points, ordered by their priority.",
                "items": {"$ref": "#/$defs/callback"},
                "default": [],
            }
        elif key == "runner":
            properties[key] = {"$ref": "#/$defs/runner", "description": defs["runner"]["description"]}
        else:
            properties[key] = {"$ref": f"#/$defs/{key}", "description": _SECTION_TEXT[key]}
    properties["augmenter"]["default"] = {"type": "none"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "dslrun pipeline",
        "description": "A declarative training pipeline: inputter, augmenter, network, modeler, callbacks, runner.",
        "type": "object",
        "properties": properties,
        "required": list(sections.REQUIRED_SECTIONS),
        "additionalProperties": False,
        "$defs": defs,
    }


def _section_union(kind: str) -> dict[str, Any]:
    types = registry.types(kind)
    union: dict[str, Any] = {
        "type": "object",
        "description": _SECTION_TEXT[kind],
        "properties": {
            "type": {
                "description": f"Which {kind} to use; the other keys are that {kind}'s parameters.",
                "enum": types,
            }
        },
        "required": ["type"],
        "allOf": [
            {
                "if": {"properties": {"type": {"const": t}}, "required": ["type"]},
                "then": {"$ref": f"#/$defs/{kind}.{t}"},
            }
            for t in types
        ],
    }
    if not types:  # nothing registered yet: an empty allOf is not a valid schema
        del union["allOf"]
    return union


def pipeline_schema() -> dict[str, Any]:
    """The full JSON Schema of a pipeline. Shared and cached: do not modify it."""
    return _cached_schema()


def schema_text() -> str:
    """The schema as committed: indent 2, sorted keys, trailing newline (stable diffs)."""
    return json.dumps(pipeline_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(path: str | Path) -> None:
    """Write `schema_text()` to `path` (how schemas/pipeline.schema.json is regenerated)."""
    Path(path).write_text(schema_text(), encoding="utf-8")


@functools.lru_cache(maxsize=1)
def validator() -> PipelineValidator:
    """The pipeline validator, built once per process: `.errors(instance)` lists every error."""
    return PipelineValidator(pipeline_schema())


class PipelineValidator:
    """`jsonschema`, one validator per component, chosen in Python by each section's `type`.

    Why not one validator of the whole schema: every section is a union of `if type == T
    then <T's schema>` branches, so jsonschema evaluates one `if` per registered type for
    every section and callback (about 2.5 times slower, see docs/benchmarks.md). The
    registry already knows which branch applies; the top level is checked without the
    branches, and each section against its component's schema only. The errors are
    jsonschema's own (`absolute_path`, `context`, `relative_schema_path`, ...), so
    `dsl.language.schema_errors` reads exactly what a whole-schema validator would give it.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        from jsonschema import Draft202012Validator

        self._schema = schema
        self._new = Draft202012Validator
        self._top = Draft202012Validator(_without_branches(schema))
        self._components: dict[str, Any] = {}

    def errors(self, instance: Any) -> list[ValidationError]:
        """Every error of `instance`, each located by its `absolute_path` from the pipeline's root."""
        found = list(self._top.iter_errors(instance))
        if not isinstance(instance, dict):
            return found
        for key, kind in sections.COMPONENT_SECTIONS.items():
            value = instance.get(key)
            if kind != "callback":
                found += self._section_errors(kind, value, (key,))
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    found += self._section_errors(kind, item, (key, index))
        return found

    def _section_errors(self, kind: str, value: Any, path: JsonPath) -> list[ValidationError]:
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            return []  # the top level reports the missing or wrong `type`
        check = self._component(f"{kind}.{value['type']}")
        if check is None:
            return []  # an unknown type: the top level's enum error says so
        errors = list(check.iter_errors(value))
        for error in errors:
            error.path.extendleft(reversed(path))  # the context's errors are located through their parent
        return errors

    def _component(self, name: str) -> Any:
        if name not in self._components:
            defs = self._schema["$defs"]
            # The root's $defs beside the component's keywords: a `#/$defs/...` ref resolves as in the whole schema.
            self._components[name] = self._new({**defs[name], "$defs": defs}) if name in defs else None
        return self._components[name]


def _without_branches(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each section's union reduced to `type` (object, required, known name)."""
    defs = {}
    for name, definition in schema["$defs"].items():
        if name.split(".", 1)[0] in registry.KINDS and "." in name:
            continue
        if name in registry.KINDS:
            definition = {k: v for k, v in definition.items() if k != "allOf"}
        defs[name] = definition
    return {**schema, "$defs": defs}


def resolve_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow local `$ref`s (`#/$defs/...`); sibling keywords of the ref are dropped."""
    root = pipeline_schema()
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 32:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
        seen += 1
    return schema


def object_schema(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The schema that applies to `value`: refs followed, a section union narrowed by `type`."""
    schema = resolve_ref(schema)
    if not isinstance(value, dict):
        return schema
    if "allOf" in schema:
        chosen = value.get("type", schema.get("properties", {}).get("type", {}).get("default"))
        for branch in schema["allOf"]:
            const = branch.get("if", {}).get("properties", {}).get("type", {}).get("const")
            if const is not None and const == chosen and "then" in branch:
                return _narrowed(schema, resolve_ref(branch["then"]), value)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            objects = [resolve_ref(s) for s in schema[keyword] if _accepts_objects(resolve_ref(s))]
            for candidate in objects:
                const = candidate.get("properties", {}).get("type", {}).get("const")
                if const is not None and const == value.get("type"):
                    return object_schema(candidate, value)
            if len(objects) == 1:
                return object_schema(objects[0], value)
    return schema


def _narrowed(outer: dict[str, Any], branch: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The properties of a union's chosen branch, completed by the outer schema's.

    A component section's branch is the whole component schema; a nested union (e.g. an
    optimizer) may declare all properties outside and only the type's own ones (with their
    defaults) in the branch, closing it with additionalProperties: false.
    """
    branch = object_schema(branch, value)
    if "properties" not in outer:
        return branch
    closed = branch.get("additionalProperties", True) is False
    inner = branch.get("properties", {})
    keys = [k for k in outer["properties"] if not closed or k in inner] + [k for k in inner if k not in outer["properties"]]
    merged = dict(branch)
    merged["properties"] = {k: _union(outer["properties"].get(k), inner.get(k)) for k in keys}
    if not closed and outer.get("additionalProperties", True) is False:
        merged["additionalProperties"] = False
    merged.pop("allOf", None)
    return merged


def _union(outer: Any, inner: Any) -> Any:
    if isinstance(outer, dict) and isinstance(inner, dict):
        return {**outer, **inner}
    return inner if inner is not None else outer


def _accepts_objects(schema: Any) -> bool:
    kinds = schema.get("type") if isinstance(schema, dict) else None
    return kinds == "object" or (isinstance(kinds, list) and "object" in kinds) or "properties" in (schema or {})


def item_schema(schema: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The schema of item `index` of an array schema (prefixItems, then items)."""
    prefix = schema.get("prefixItems", [])
    if index < len(prefix):
        item: dict[str, Any] = prefix[index]
        return item
    items = schema.get("items")
    return items if isinstance(items, dict) else None


def schema_at(tree: Any, path: JsonPath) -> dict[str, Any] | None:
    """The schema of the value at `path` of `tree` (every step of `path` must exist in `tree`)."""
    schema: dict[str, Any] | None = pipeline_schema()
    value = tree
    for part in path:
        if schema is None:
            return None
        schema = object_schema(schema, value)
        if isinstance(part, int):
            schema = item_schema(schema, part)
        else:
            schema = schema.get("properties", {}).get(part)
        value = value[part]
    return None if schema is None else object_schema(schema, value)


def allowed_keys(tree: Any, path: JsonPath) -> list[str] | None:
    """The keys the schema allows in the mapping at `path`; None when it does not restrict them."""
    schema = schema_at(tree, path)
    if schema is None or "properties" not in schema:
        return None
    if schema.get("additionalProperties", True) is not False and "allOf" not in schema:
        return None
    return list(schema["properties"])
