"""dslrun's per-section validator against one `jsonschema` validator of the whole schema.

The whole schema is the reference: editors and other tools validate with it. dslrun's
validator must find the same problems with the same error context, because
`dsl.language.schema_errors` turns that context (anyOf alternatives, the failing schema's
properties) into the messages users read. A whole-schema validator repeats a section's
`type` error once per `if type == T` branch, so errors are compared as sets.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from dsl.language import schema_errors
from dsl.language.diagnostics import SourceMap
from dsl.language.schema import pipeline_schema, validator

_REFERENCE: list[Draft202012Validator] = []


class _Whole:
    """The reference, shaped like `dsl.language.schema.validator()`."""

    def errors(self, instance: Any) -> list[Any]:
        if not _REFERENCE:
            _REFERENCE.append(Draft202012Validator(pipeline_schema()))
        return list(_REFERENCE[0].iter_errors(instance))


def _summary(errors: list[Any]) -> set[tuple[Any, ...]]:
    """What `dsl.language.schema_errors` reads of each error, its context included."""
    return {
        (
            tuple(map(str, e.absolute_path)),
            e.validator,
            e.message,
            _properties(e) if e.validator in ("additionalProperties", "required") else (),
            tuple(sorted(_summary_of_context(sub) for sub in e.context)),
        )
        for e in errors
    }


def _properties(error: Any) -> tuple[Any, ...]:
    """The failing schema's properties: allowed keys, descriptions and `type` choices in the messages."""
    return tuple(sorted((k, repr(v)) for k, v in error.schema.get("properties", {}).items()))


def _summary_of_context(sub: Any) -> tuple[Any, ...]:
    return (tuple(map(str, sub.relative_schema_path)), tuple(map(str, sub.relative_path)), sub.validator, sub.message)


def assert_agrees(tree: Any, monkeypatch: Any) -> None:
    """Same errors and context as the whole-schema validator, and the same diagnostics."""
    ours = validator().errors(tree)
    theirs = _Whole().errors(tree)
    assert _summary(ours) == _summary(theirs), tree
    sources = SourceMap()
    expected = [d.format_text() for d in _with(monkeypatch, _Whole(), lambda: schema_errors.validate_tree(tree, sources))]
    assert [d.format_text() for d in schema_errors.validate_tree(tree, sources)] == expected, tree


def _with(monkeypatch: Any, replacement: Any, call: Any) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(schema_errors, "validator", lambda: replacement)
        return call()
