"""Filling in what a pipeline leaves out, from the `default`s of the schema.

The resolved pipeline is complete: every parameter of every chosen component, of the
runner and of each callback is present, so the engine never guesses a default and the
stored `pipeline.yaml` of a run says exactly what ran. Keys come out in the order the
schema declares them (`type` first), so two equivalent files resolve to the same text.
"""

from __future__ import annotations

import copy
from typing import Any

from dsl.language.registry import COUNTED
from dsl.language.schema import item_schema, object_schema, pipeline_schema


def fill_defaults(pipeline: dict[str, Any]) -> dict[str, Any]:
    """A copy of a schema-valid `pipeline` with every omitted optional value set to its default."""
    filled: dict[str, Any] = _fill(pipeline, pipeline_schema())
    _count_classes(filled.get("inputter"))
    return filled


def _count_classes(inputter: Any) -> None:
    """An inputter's num_classes left out (image_folder's, text_folder's) is the number of classes it
    declares by its registered facts (its sub-folders, when they are there), so that the stored
    pipeline and every section read a number; left out when they are not there yet."""
    from dsl.language.registry import lookup
    from dsl.language.rules import declared_classes

    if not isinstance(inputter, dict) or "num_classes" not in inputter or inputter["num_classes"] is not None:
        return
    names = declared_classes(inputter)
    if not names:
        return
    inputter["num_classes"] = len(names)
    order = ["type", *lookup("inputter", str(inputter["type"])).params]  # the schema's order, as _fill keeps it
    for key in sorted(inputter, key=lambda key: order.index(key) if key in order else len(order)):
        inputter[key] = inputter.pop(key)


def _fill(value: Any, schema: dict[str, Any] | bool | None) -> Any:
    if not isinstance(schema, dict):
        return copy.deepcopy(value)
    schema = object_schema(schema, value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        out: dict[str, Any] = {}
        for key, prop in properties.items():
            if key in value:
                out[key] = _fill(value[key], prop)
            elif isinstance(prop, dict) and "default" in prop:
                out[key] = _fill(copy.deepcopy(prop["default"]), prop)
            elif key in COUNTED and isinstance(value.get(COUNTED[key]), list):
                out[key] = len(value[COUNTED[key]])
        for key, item in value.items():  # keys the schema does not name (free-form mappings)
            if key not in out:
                out[key] = copy.deepcopy(item)
        return out
    if isinstance(value, list):
        return [_fill(item, item_schema(schema, index)) for index, item in enumerate(value)]
    return value
