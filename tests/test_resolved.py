"""dsl/language/resolved.py: the resolved pipeline the engine reads is typed, frozen, and says
exactly what the language resolved (no TensorFlow)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsl.language import backend_registry, sections
from dsl.language.pipeline import check_pipeline, dump_pipeline
from dsl.language.resolved import Component, Pipeline, Runner

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "pipelines").glob("*.yaml"))


def test_the_runner_has_a_field_for_each_key_the_schema_gives_it() -> None:
    """A runner key added to the schema without a typed field (or the other way) fails here, not
    as a key the engine silently never reads."""
    declared_by_backends = {key for spec in backend_registry.backends() for key in spec.settings}
    own = set(sections.runner_params()) - declared_by_backends
    fields = {field.name for field in dataclasses.fields(Runner)} - {"settings"}
    assert fields == own


@pytest.mark.parametrize("path", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_a_shipped_pipeline_freezes_and_writes_back_the_same_text(path: Path) -> None:
    resolved, diagnostics = check_pipeline(path, environ={"DATA_DIR": "data"})
    assert resolved is not None, [d.format_text() for d in diagnostics]
    typed = Pipeline.from_resolved(resolved)
    assert typed.to_dict() == resolved
    assert dump_pipeline(typed.to_dict()) == dump_pipeline(resolved)  # the run directory's pipeline.yaml
    assert typed.runner.model_dir == resolved["runner"]["model_dir"]
    assert typed.runner.workflow == tuple((mode, count) for mode, count in resolved["runner"]["workflow"])
    assert [callback.type for callback in typed.callbacks] == [c["type"] for c in resolved["callbacks"]]
    assert set(typed.runner.settings) == {key for spec in backend_registry.backends() for key in spec.settings}


def test_nothing_can_change_what_another_section_reads(tmp_path: Path) -> None:
    resolved, _ = check_pipeline(ROOT / "pipelines" / "quickstart.yaml")
    assert resolved is not None
    typed = Pipeline.from_resolved(resolved)
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.runner.max_epochs = 100  # type: ignore[misc]
    with pytest.raises(TypeError):
        typed.inputter.params["batch_size"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        typed.runner.settings["horovod"] = {}  # type: ignore[index]
    # A builder gets its own copy: what it changes stays its own.
    arguments = typed.modeler.arguments()
    arguments["optimizer"]["learning_rate"] = 99.0
    assert typed.modeler.params["optimizer"]["learning_rate"] != 99.0
    # Freezing copies: changing the tree afterwards changes nothing frozen.
    resolved["inputter"]["batch_size"] = 3
    assert typed.inputter.params["batch_size"] == 64


def test_a_section_declared_beside_the_language_is_carried_whole(tmp_path: Path) -> None:
    path = tmp_path / "swept.yaml"
    path.write_text(
        f"extends: {ROOT / 'pipelines' / 'quickstart.yaml'}\n"
        "sweep:\n  parameters:\n    modeler.optimizer.learning_rate: {type: log_uniform, low: 0.01, high: 0.1}\n",
        encoding="utf-8")
    resolved, diagnostics = check_pipeline(path)
    assert resolved is not None, [d.format_text() for d in diagnostics]
    typed = Pipeline.from_resolved(resolved)
    assert set(typed.sections) == {"sweep"} and typed.sections["sweep"]["max_trials"] == 20
    assert typed.to_dict() == resolved


def test_a_single_process_copy_changes_the_backend_and_nothing_else() -> None:
    resolved, _ = check_pipeline(ROOT / "pipelines" / "cifar10_ps.yaml", environ={"DATA_DIR": "data"})
    assert resolved is not None
    typed = Pipeline.from_resolved(resolved)
    local = typed.with_runner(typed.runner.with_backend(backend_registry.fallback().name))
    assert local.runner.backend == backend_registry.fallback().name != typed.runner.backend
    assert {**local.to_dict()["runner"], "backend": typed.runner.backend} == typed.to_dict()["runner"]
    assert local.runner.params["backend"] == local.runner.backend


def test_a_component_keeps_its_type_and_parameters() -> None:
    component = Component.from_resolved({"type": "mlp", "hidden": [8]})
    assert component.type == "mlp" and component.arguments() == {"type": "mlp", "hidden": [8]}
