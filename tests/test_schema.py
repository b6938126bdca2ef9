"""The generated JSON Schema, the defaults read from it, the committed copies and the dump."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from schema_agreement import assert_agrees

from dsl.language import registry
from dsl.language.catalogue_doc import render_markdown
from dsl.language.pipeline import check_pipeline, dump_pipeline, load_pipeline
from dsl.language.schema import pipeline_schema, schema_text, validator

ROOT = Path(__file__).resolve().parents[1]


def require(kind: str, *names: str) -> None:
    missing = [n for n in names if n not in registry.types(kind)]
    if missing:
        pytest.skip(f"{kind} type(s) {', '.join(missing)} not registered yet")


_COMBINATORS = ("allOf", "anyOf", "oneOf", "if", "then", "else", "not")


def walk_properties(node: Any, where: str = "", declared: frozenset[str] = frozenset()) -> Iterator[tuple[str, Any, bool]]:
    """(location, property schema, restated) for every entry of every `properties` in the schema.

    `restated` marks a property inside a combinator (if/anyOf/...) that its enclosing object
    already declares: a condition on it, not a new declaration.
    """
    if isinstance(node, dict):
        own = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        for name, prop in own.items():
            yield f"{where}.properties.{name}", prop, name in declared
            yield from walk_properties(prop, f"{where}.properties.{name}")
        for key, value in node.items():
            if key in _COMBINATORS:
                yield from walk_properties(value, f"{where}.{key}", declared | frozenset(own))
            elif key not in ("properties", "enum", "const", "default", "examples"):
                yield from walk_properties(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from walk_properties(item, f"{where}[{index}]", declared)


def test_schema_is_a_valid_2020_12_schema() -> None:
    schema = pipeline_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_property_has_a_description() -> None:
    missing = [
        where
        for where, prop, restated in walk_properties(pipeline_schema())
        if isinstance(prop, dict) and not prop.get("description") and not restated
    ]
    assert missing == [], f"properties without a description: {missing}"


def test_every_default_is_valid_for_its_property() -> None:
    schema = pipeline_schema()
    bad = []
    for where, prop, _ in walk_properties(schema):
        if isinstance(prop, dict) and "default" in prop:
            checker = Draft202012Validator({**prop, "$defs": schema["$defs"]})
            if not checker.is_valid(prop["default"]):
                bad.append(f"{where}: {prop['default']!r}")
    assert bad == []


def test_sections_are_unions_discriminated_by_type() -> None:
    schema = pipeline_schema()
    for kind in registry.KINDS:
        union = schema["$defs"][kind]
        types = registry.types(kind)
        assert union["properties"]["type"]["enum"] == types
        for branch, name in zip(union.get("allOf", []), types):
            assert branch["if"] == {"properties": {"type": {"const": name}}, "required": ["type"]}
            assert branch["then"] == {"$ref": f"#/$defs/{kind}.{name}"}
            assert schema["$defs"][f"{kind}.{name}"]["additionalProperties"] is False
    assert schema["properties"]["callbacks"]["items"] == {"$ref": "#/$defs/callback"}
    assert schema["additionalProperties"] is False


def test_schema_text_is_stable_and_sorted() -> None:
    text = schema_text()
    assert text.endswith("}\n") and text == schema_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_committed_schema_is_up_to_date() -> None:
    committed = ROOT / "schemas" / "pipeline.schema.json"
    assert committed.is_file(), "schemas/pipeline.schema.json is missing: dslrun schema -o schemas/pipeline.schema.json"
    assert committed.read_text(encoding="utf-8") == schema_text(), (
        "schemas/pipeline.schema.json differs from the registry: dslrun schema -o schemas/pipeline.schema.json"
    )


def test_committed_components_doc_is_up_to_date() -> None:
    committed = ROOT / "docs" / "components.md"
    assert committed.is_file(), "docs/components.md is missing: dslrun list --markdown > docs/components.md"
    assert committed.read_text(encoding="utf-8") == render_markdown(), (
        "docs/components.md differs from the registry: dslrun list --markdown > docs/components.md"
    )


PIPELINE = """\
version: 1
inputter:
  type: synthetic
  image_shape: [8, 8, 3]
  batch_size: 4
network:
  type: mlp
  hidden_units: [4]
modeler:
  type: image_classification
  optimizer: {type: sgd}
callbacks:
  - type: checkpoint
runner:
  max_iters: 5
"""


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    require("inputter", "synthetic")
    require("network", "mlp")
    require("modeler", "image_classification")
    require("callback", "checkpoint")
    path = tmp_path / "tiny-demo.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    return path


def test_defaults_are_filled_everywhere(pipeline_file: Path) -> None:
    resolved = load_pipeline(pipeline_file, environ={})
    schema = pipeline_schema()["$defs"]
    assert resolved["name"] == "tiny-demo" and resolved["runner"]["model_dir"] == "runs/tiny-demo"
    assert resolved["augmenter"]["type"] == "none" and resolved["callbacks"][0]["type"] == "checkpoint"
    for section, kind in (("inputter", "inputter"), ("network", "network"), ("modeler", "modeler")):
        declared = set(schema[f"{kind}.{resolved[section]['type']}"]["properties"])
        defaulted = {k for k in declared if "default" in schema[f"{kind}.{resolved[section]['type']}"]["properties"][k]}
        assert defaulted <= set(resolved[section]) <= declared
    assert set(resolved["runner"]) == set(schema["runner"]["properties"])
    checkpoint = schema["callback.checkpoint"]["properties"]
    assert {k for k in checkpoint if "default" in checkpoint[k]} <= set(resolved["callbacks"][0])
    assert next(iter(resolved["network"])) == "type"
    # The resolved pipeline is itself valid, and resolving it again changes nothing.
    assert validator().errors(resolved) == []


def test_nested_union_defaults_follow_the_chosen_type(pipeline_file: Path) -> None:
    optimizer = load_pipeline(pipeline_file, environ={})["modeler"].get("optimizer")
    if not isinstance(optimizer, dict):
        pytest.skip("the modeler has no optimizer mapping")
    assert optimizer["type"] == "sgd"
    assert "momentum" not in optimizer  # a default of another optimizer type is not added


def test_dump_round_trips(pipeline_file: Path, tmp_path: Path) -> None:
    resolved = load_pipeline(pipeline_file, environ={})
    text = dump_pipeline(resolved)
    assert text.splitlines()[0] == "version: 1"
    keys = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "-"))]
    assert keys == [k for k in ("version", "name", "description", "seed", "deterministic", "inputter", "augmenter",
                                "network", "modeler", "callbacks", "runner") if k in resolved]
    assert "workflow: [[train, 1]]" in text
    again = tmp_path / "tiny-demo.yaml"
    again.write_text(text, encoding="utf-8")
    assert load_pipeline(again, environ={}) == resolved
    assert dump_pipeline(load_pipeline(again, environ={})) == text


def test_validation_does_not_change_the_input(pipeline_file: Path) -> None:
    resolved = load_pipeline(pipeline_file, environ={})
    before = copy.deepcopy(resolved)
    validator().errors(resolved)
    assert resolved == before


def test_section_validator_agrees_with_the_whole_schema(pipeline_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = load_pipeline(pipeline_file, environ={})
    samples = [resolved]
    for path, value in [
        (("inputter", "batch_size"), 0),
        (("inputter", "batch_size"), 2.0),
        (("inputter", "batch_size"), True),
        (("network", "type"), "nope"),
        (("network", "extra"), 1),
        (("runner", "jit_compile"), "sometimes"),
        (("runner", "workflow"), [["train", 1, 2]]),
        (("modeler", "optimizer"), {"type": "sgd", "momentum": 0.9}),
        (("callbacks",), [{"type": "checkpoint", "priority": "NORML"}, 3, {}]),
        (("version",), 1.0),
        (("modeler", "optimizer"), {"type": "sgd", "momemtum": 0.9}),
        (("modeler", "optimizer"), "adam"),
        (("network",), "mlp"),
        (("network", "type"), ["mlp"]),
        (("inputter",), {"batch_size": 8}),
        (("callbacks",), [{"type": "progres"}, {"type": "checkpoint", "every_n_epochs": 0, "extra": 1}]),
        (("seed",), -1),
    ]:
        sample = copy.deepcopy(resolved)
        target = sample
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        samples.append(sample)
    for sample in samples:
        assert_agrees(sample, monkeypatch)


def test_check_pipeline_reports_instead_of_raising(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\n", encoding="utf-8")
    resolved, diagnostics = check_pipeline(path, environ={})
    assert resolved is None
    assert {d.path for d in diagnostics} == {"inputter", "network", "modeler", "runner"}
    assert all(d.message.startswith("missing required section") for d in diagnostics)
