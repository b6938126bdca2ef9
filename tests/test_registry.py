"""The registry is the single source of truth: every type has a builder and a schema."""

import importlib
import pkgutil

import pytest

from dsl.language.registry import (
    KINDS,
    Component,
    RegistryError,
    component_packages,
    components,
    is_component_module,
    lookup,
    register,
)


def test_every_registered_type_has_a_builder_and_a_described_schema() -> None:
    found = components()
    assert {c.kind for c in found} == set(KINDS)
    for component in found:
        assert callable(component.builder), f"{component.kind} {component.type} has no builder"
        schema = component.schema()
        assert schema["additionalProperties"] is False
        assert component.description, f"{component.kind} {component.type} has no description"
        for name, param in component.params.items():
            assert param.get("description"), f"{component.kind} {component.type}.{name} has no description"
            assert name in component.required or "default" in param, f"{component.type}.{name} has no default"


# What each kind's builder returns: the contract of dsl/engine/contracts.py it honours (strict
# mypy then holds the component to it); callbacks are classes, built by calling them.
RETURNS = {"inputter": "Inputter", "augmenter": "Augmenter", "network": "Model", "modeler": "Modeler"}


def test_every_builder_is_typed_against_the_contracts() -> None:
    """A builder takes the typed BuildContext and returns its kind's contract, not Any."""
    untyped = []
    for component in components():
        hints = getattr(component.builder, "__annotations__", {})
        if component.kind == "callback":
            hints = getattr(component.builder.__init__, "__annotations__", {})
            wanted = {"context": "BuildContext | None"}
        else:
            wanted = {"context": "BuildContext", "return": RETURNS[component.kind]}
        if any(hints.get(name) != value for name, value in wanted.items()):
            untyped.append(f"{component.kind} {component.type}: {hints}")
    assert untyped == []


def test_every_component_module_registers_something() -> None:
    """Every public module of a kind's package or a task's folder registers a type or a data set;
    what tasks build on is named in the package's LIBRARY."""
    from dsl import datasets

    modules = {c.module for c in components()}
    modules |= {command.callback.__module__ for command in datasets.commands().values() if command.callback}
    walked = []
    for package_name in component_packages():
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            if is_component_module(info.name, package):
                walked.append(f"{package_name}.{info.name}")
                assert f"{package_name}.{info.name}" in modules, f"{package_name}.{info.name} registers nothing"
    assert {"dsl.tasks.object_detection.modeler", "dsl.tasks.object_detection.data", "dsl.callbacks.checkpoint"} <= set(walked)


def test_every_task_folder_is_walked() -> None:
    tasks = [name for name in component_packages() if name.startswith("dsl.tasks.")]
    assert tasks == ["dsl.tasks.image_classification", "dsl.tasks.image_segmentation", "dsl.tasks.machine_translation",
                     "dsl.tasks.object_detection", "dsl.tasks.text_classification"]


def test_unknown_type_names_the_fix() -> None:
    with pytest.raises(RegistryError, match="make sure its module"):
        lookup("network", "no_such_network")


def test_duplicate_registration_raises() -> None:
    existing: Component = lookup("network", "mlp")
    with pytest.raises(RegistryError, match="registered twice"):
        register("network", "mlp", params={}, description="again")(lambda params, context: None)
    assert lookup("network", "mlp") is existing


def test_every_inputter_lists_its_examples_for_validate_data() -> None:
    missing = [c.type for c in components("inputter") if c.examples is None]
    assert not missing, f"inputter types without `examples` (validate --data cannot check them): {missing}"


def test_every_callback_takes_a_priority_added_by_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsl.language import registry
    from dsl.language.priorities import PRIORITY_PARAM

    assert all(c.params["priority"] is PRIORITY_PARAM and list(c.params)[-1] == "priority" for c in components("callback"))
    monkeypatch.setitem(registry._REGISTRY, "callback", dict(registry._REGISTRY["callback"]))
    register("callback", "test_quiet", params={"n": {"type": "integer", "default": 1}}, description="t")(lambda p, c: None)
    assert list(lookup("callback", "test_quiet").params) == ["n", "priority"]
    assert "priority" not in lookup("network", "mlp").params


def test_a_callback_declaring_priority_itself_is_refused() -> None:
    with pytest.raises(RegistryError, match="declares priority, which the registry adds to every callback"):
        register("callback", "test_loud", params={"priority": {"type": "integer"}}, description="t")


def test_what_a_component_does_is_its_builders_docstring(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsl.language import registry

    monkeypatch.setitem(registry._REGISTRY, "callback", dict(registry._REGISTRY["callback"]))
    monkeypatch.setitem(registry._REGISTRY, "network", dict(registry._REGISTRY["network"]))

    @register("network", "test_documented", params={})
    def build(params: object, context: object) -> None:
        """Two dense layers,
        then logits.

        For developers: not shown to users.
        """

    assert lookup("network", "test_documented").description == "Two dense layers, then logits."
    assert lookup("network", "mlp").description.startswith("Multi-layer perceptron")

    class Base:
        """The base class's words, which a subclass must not borrow."""

    with pytest.raises(RegistryError, match=r"'test_undocumented' .* has no docstring"):
        register("callback", "test_undocumented", params={})(type("Undocumented", (Base,), {}))
    register("callback", "test_worded", params={}, description="Worded by the plug-in.")(type("Worded", (Base,), {}))
    assert lookup("callback", "test_worded").description == "Worded by the plug-in."
