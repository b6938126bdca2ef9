"""Settings objects whose `type` decides their other keys: the modelers' `optimizer` and `lr_schedule`.

One table per object maps each key to its JSON Schema and, for each type that takes it,
that type's default. From the table come the schema (the language rejects `momentum` on
adam, each type has its own defaults) and `fill_typed`, which applies the same rules to a
modeler built directly (tests, notebooks). Pure Python, so modeler modules can import it
at module level and stay TensorFlow-free.
"""

from __future__ import annotations

import copy
from typing import Any

from dsl.language.errors import DslError

REQUIRED = "<required>"  # in a defaults table: the key must be given for that type

# key -> (its schema, {each type that takes the key: the default for that type}).
KeyTable = dict[str, tuple[dict[str, Any], dict[str, Any]]]


def typed_param(
    section: str, description: str, types: dict[str, str], default_type: str, keys: KeyTable
) -> dict[str, Any]:
    """The modeler parameter `section` holding such an object: its schema, defaulting to `default_type` filled."""
    return {
        **typed_object_schema(description, types, default_type, keys),
        "default": fill_typed(section, {}, types, default_type, keys),
    }


def typed_object_schema(description: str, types: dict[str, str], default_type: str, keys: KeyTable) -> dict[str, Any]:
    """JSON Schema of an object whose `type` decides its other keys (one if/then per type).

    The shared `properties` list every key (for editors and the catalogue) with a default
    only where it is the same for every type; each type's `then` lists the keys it takes
    with that type's defaults and rejects the others as unknown keys.
    """
    type_schema = {
        "description": "Which one: " + "; ".join(f"{name} = {text}" for name, text in types.items()) + ".",
        "type": "string",
        "enum": list(types),
        "default": default_type,
    }
    properties: dict[str, Any] = {"type": type_schema}
    for key, (schema, defaults) in keys.items():
        properties[key] = dict(schema)
        if set(defaults) == set(types) and len({repr(value) for value in defaults.values()}) == 1:
            properties[key]["default"] = copy.deepcopy(next(iter(defaults.values())))
    branches = []
    for name, text in types.items():
        condition: dict[str, Any] = {"properties": {"type": {"const": name}}}
        if name != default_type:
            condition["required"] = ["type"]  # no `type` means the default type
        branches.append({"if": condition, "then": _type_branch(name, text, keys)})
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "additionalProperties": False,
        "allOf": branches,
    }


def _type_branch(name: str, text: str, keys: KeyTable) -> dict[str, Any]:
    """The keys type `name` takes, with its defaults (or required), and no other key."""
    properties: dict[str, Any] = {"type": {"description": f"{name}: {text}.", "const": name}}
    required = []
    for key, (schema, defaults) in keys.items():
        if name not in defaults:
            continue
        properties[key] = dict(schema)
        if defaults[name] == REQUIRED:
            required.append(key)
            if isinstance(schema.get("type"), list):  # a required key is never null
                properties[key]["type"] = [t for t in schema["type"] if t != "null"]
        else:
            properties[key]["default"] = copy.deepcopy(defaults[name])
    branch: dict[str, Any] = {"properties": properties, "additionalProperties": False}
    if required:
        branch["required"] = required
    return branch


def fill_typed(
    section: str, config: dict[str, Any] | None, types: dict[str, str], default_type: str, keys: KeyTable
) -> dict[str, Any]:
    """`modeler.<section>` with its type's defaults filled.

    The language has already validated and filled it; this repeats the rules so that the
    modeler built directly (tests, notebooks) is held to them too.
    """
    config = dict(config or {})
    kind = config.get("type", default_type)
    if kind not in types:
        raise DslError(f"modeler.{section}.type: unknown {section} {kind!r}; use one of {', '.join(types)}")
    takes = [key for key, (_, defaults) in keys.items() if kind in defaults]
    for key in config:
        if key != "type" and key not in takes:
            raise DslError(
                f"modeler.{section}.{key}: not a setting of the {kind} {section}; it takes: {', '.join(takes)}"
            )
    filled: dict[str, Any] = {"type": kind}
    for key in takes:
        default = keys[key][1][kind]
        if key not in config and default == REQUIRED:
            raise DslError(f"modeler.{section}.{key}: required by the {kind} {section}; add it")
        filled[key] = config[key] if key in config else copy.deepcopy(default)
    return filled
