"""The resolved pipeline as typed, frozen values: what the engine, the backends and a
component's build context read once `dslrun validate` would pass.

The language works on the tree (a dict) while it still may be wrong: every pass reports
located diagnostics on it (dsl.language.pipeline). Once the tree is valid and its defaults
are filled, `Pipeline.from_resolved` freezes it, so the code that trains reads
`pipeline.runner.max_epochs` (checked by mypy) rather than `pipeline["runner"].get("max_epochs")`
(a typo there is a silent None), and no section can change what another one reads.

What is typed here is what the engine reads of the pipeline: its top-level keys and the
runner's own keys. A component's parameters stay the component's (`Component.params`,
validated by its own JSON Schema, read by its own builder), and so do a backend's settings
section (`Runner.settings`, declared by the backend's registration): the language knows
neither ahead. The JSON Schema stays the source of the keys; tests/test_resolved.py fails
when a runner key is added to the schema without a field here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from dsl.language import sections


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a private deep copy: nobody changes what another section reads."""
    return MappingProxyType(copy.deepcopy(dict(value)))


@dataclass(frozen=True)
class Component:
    """One component as the pipeline declares it: its registered `type` and its own parameters,
    validated by its schema with the defaults filled (`type` included, as its builder reads them)."""

    type: str
    params: Mapping[str, Any]

    @classmethod
    def from_resolved(cls, params: Mapping[str, Any]) -> Component:
        return cls(str(params["type"]), _frozen(params))

    def arguments(self) -> dict[str, Any]:
        """A fresh copy of the parameters for the component's builder, which may keep and change it."""
        return copy.deepcopy(dict(self.params))


@dataclass(frozen=True)
class Runner:
    """The `runner` section: how the loop runs (docs/components.md#runner describes each key).

    `settings` holds the sections the backends declare (`runner.horovod`, `runner.ps`, ...),
    by key: a backend reads its own, as a component reads its parameters.
    """

    backend: str
    batch_scaling: str
    lr_scaling: str
    async_lr_scaling: str
    async_momentum: str
    divergence: Mapping[str, Any]
    model_dir: str
    workflow: tuple[tuple[str, int], ...]
    max_epochs: int | None
    max_iters: int | None
    val_steps: int | None
    steps_per_call: int
    precision: str
    jit_compile: bool | str
    intra_op_threads: int | None
    inter_op_threads: int | None
    metrics_format: str
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_resolved(cls, runner: Mapping[str, Any]) -> Runner:
        own = {f.name for f in fields(cls)} - {"settings"}
        values: dict[str, Any] = {name: copy.deepcopy(runner[name]) for name in own}
        values["divergence"] = _frozen(runner["divergence"])
        values["workflow"] = tuple((str(mode), int(count)) for mode, count in runner["workflow"])
        values["settings"] = _frozen({key: value for key, value in runner.items() if key not in own})
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The section as the resolved YAML writes it, in the schema's order (`dslrun show`'s)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "settings"}
        own["divergence"] = dict(self.divergence)
        own["workflow"] = [[mode, count] for mode, count in self.workflow]
        merged = {**own, **copy.deepcopy(dict(self.settings))}
        ordered = {key: merged.pop(key) for key in sections.runner_params() if key in merged}
        return {**ordered, **merged}

    @cached_property
    def params(self) -> Mapping[str, Any]:
        """The whole section as a read-only mapping, for what takes it by key: a backend's
        `create(runner_params, environ)` and capabilities (dsl.language.backend_registry)."""
        return MappingProxyType(self.to_dict())

    def with_backend(self, name: str) -> Runner:
        return replace(self, backend=name)


@dataclass(frozen=True)
class Pipeline:
    """A resolved, valid pipeline (defaults filled, `name` and `runner.model_dir` decided).

    `sections` holds the top-level sections declared beside the language (`sweep:`,
    dsl.language.sections.register_section), which the engine does not read.
    """

    version: int
    name: str
    description: str
    seed: int | None
    deterministic: bool
    inputter: Component
    augmenter: Component
    network: Component
    modeler: Component
    callbacks: tuple[Component, ...]
    runner: Runner
    sections: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_resolved(cls, resolved: Mapping[str, Any]) -> Pipeline:
        """Freeze what `dsl.language.pipeline.check_pipeline` returned (it must have no errors)."""
        known = {f.name for f in fields(cls)} - {"sections"}
        return cls(
            version=int(resolved["version"]),
            name=str(resolved["name"]),
            description=str(resolved.get("description") or ""),
            seed=resolved.get("seed"),
            deterministic=bool(resolved.get("deterministic", False)),
            inputter=Component.from_resolved(resolved["inputter"]),
            augmenter=Component.from_resolved(resolved.get("augmenter") or {"type": "none"}),
            network=Component.from_resolved(resolved["network"]),
            modeler=Component.from_resolved(resolved["modeler"]),
            callbacks=tuple(Component.from_resolved(c) for c in resolved.get("callbacks") or ()),
            runner=Runner.from_resolved(resolved["runner"]),
            sections=_frozen({key: value for key, value in resolved.items() if key not in known}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The resolved YAML tree again (pipeline.yaml in the run directory, MLflow's copy)."""
        tree: dict[str, Any] = {"version": self.version, "name": self.name, "description": self.description,
                                "seed": self.seed, "deterministic": self.deterministic}
        for key in ("inputter", "augmenter", "network", "modeler"):
            tree[key] = getattr(self, key).arguments()
        tree["callbacks"] = [callback.arguments() for callback in self.callbacks]
        tree["runner"] = self.runner.to_dict()
        tree.update(copy.deepcopy(dict(self.sections)))
        return tree

    def callbacks_of(self, type_name: str) -> tuple[Component, ...]:
        """The callbacks of this registered type, in the pipeline's order."""
        return tuple(callback for callback in self.callbacks if callback.type == type_name)

    def with_runner(self, runner: Runner) -> Pipeline:
        return replace(self, runner=runner)
