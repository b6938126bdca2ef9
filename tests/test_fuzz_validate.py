"""Property tests: odd input never crashes the language, and validation agrees with the whole schema.

Bounded (a few hundred examples in all) so that the file stays well under a minute.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_agreement import assert_agrees

from dsl.language import registry
from dsl.language.diagnostics import is_error
from dsl.language.loader import LoadError, parse_text
from dsl.language.pipeline import check_pipeline, load_pipeline

PIPELINE = """\
version: 1
inputter:
  type: synthetic
  num_examples: {train: 32, val: 16}
  image_shape: [8, 8, 3]
  batch_size: 8
network:
  type: mlp
  hidden_units: [8]
modeler:
  type: image_classification
callbacks:
  - type: checkpoint
  - type: progress
runner:
  max_epochs: 2
  workflow: [[train, 1], [val, 1]]
"""

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(-2, 2, allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["mlp", "sgd", "val", "train", "auto", "NORMAL", "checkpoint", "none"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["type", "x", "val", "momentum"]), children, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    for kind, name in (("inputter", "synthetic"), ("network", "mlp"), ("modeler", "image_classification"), ("callback", "checkpoint"), ("callback", "progress")):
        if name not in registry.types(kind):
            pytest.skip(f"{kind} type {name} not registered yet")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        path.write_text(PIPELINE, encoding="utf-8")
        return load_pipeline(path, environ={})


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths_of(item, prefix + (index,))
    return found


def mutate(tree: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    tree = copy.deepcopy(tree)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths_of(tree)[1:]))
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "momemtum", "type", "priority", "val"]))] = data.draw(json_values)
        else:
            parent[path[-1]] = data.draw(json_values)
    return tree


@FUZZ
@given(data=st.data())
def test_section_validator_agrees_with_the_whole_schema(resolved: dict[str, Any], data: st.DataObject) -> None:
    tree = mutate(resolved, data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_agrees(tree, monkeypatch)


@FUZZ
@given(data=st.data())
def test_check_pipeline_never_raises(resolved: dict[str, Any], data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    tree = mutate(resolved, data)
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    result, diagnostics = check_pipeline(path, environ={})
    assert (result is None) == any(is_error(d) for d in diagnostics)
    for diagnostic in diagnostics:
        assert diagnostic.line >= 1 and diagnostic.col >= 1 and diagnostic.message


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!<>|'\"#,?\t\n 0123456789.e_$")), max_size=60))
def test_loader_only_raises_load_errors(text: str) -> None:
    try:
        document = parse_text(text, "f.yaml")
    except LoadError as exc:
        assert exc.diagnostics and all(d.line >= 1 and d.col >= 1 for d in exc.diagnostics)
        return
    for path in document.sources:
        location = document.sources.locate(path)
        assert location.line >= 1 and location.col >= 1

