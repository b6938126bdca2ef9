"""The component catalogue: every `type:` a pipeline may name, with its parameters.

The registry is the single source of truth. The JSON Schema (`dslrun schema`), the
catalogue (`dslrun list`), `docs/components.md` and the compiler all read it, so a
component exists for users exactly when it is registered here.

A component is one module under `dsl/<kind>s/` that calls `register(...)` on its builder
at import time. Those modules must not import TensorFlow at module level (import it inside
`build`), because `dslrun validate` imports every one of them and must stay fast and
TensorFlow-free. Modules whose name starts with `_` are private helpers: they are not
walked by `load_all` and may import TensorFlow. A kind's `base` module (the class its
components derive from, e.g. `dsl.engine.hooks.Callback`) is not a component either.

Besides its parameters a component declares, in pure Python, what the language checks
between sections: the phase outputs it produces (`outputs`, e.g. the modeler's
`val/accuracy`), the outputs it reads (`reads`, plus every parameter whose schema has
`"format": "phase-output"`, e.g. `checkpoint.save_best.monitor`), and for an inputter
how to list its examples without TensorFlow (`examples`, for `dslrun validate --data`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsl.language.errors import RegistryError

# A count that, left out, is the length of the list it counts: `num_classes` of a section that
# names its `classes` (its schema asks for one of the two; defaults.py fills it in).
COUNTED = {"num_classes": "classes"}

# The JSON Schema `format` of a parameter whose value names a phase output, `<phase>/<output>`.
PHASE_OUTPUT_FORMAT = "phase-output"

# Outputs per phase a component produces, from its (resolved) parameters: {"val": ["loss", ...]}.
# outputs(section) or outputs(section, pipeline): phase -> output names the component adds.
Outputs = Callable[..., dict[str, list[str]]]

# kind -> the package of its shared modules (the YAML section a user writes): components any task
# can use (a Keras application, the callbacks) and what the tasks' components build on.
KINDS: dict[str, str] = {
    "inputter": "dsl.inputters",
    "augmenter": "dsl.augmenters",
    "network": "dsl.networks",
    "modeler": "dsl.modelers",
    "callback": "dsl.callbacks",
}


# The tasks: each folder under dsl/tasks/ registers one task's components of every kind (its
# inputters, augmenter, networks, modeler) and its data sets, from its public modules.
TASKS_PACKAGE = "dsl.tasks"

# Modules of a kind's package that hold no component: its base class.
_BASE_MODULES = frozenset({"base"})


def is_component_module(name: str, package: Any = None) -> bool:
    """Whether the module `name` of a component package registers components (walked by `load_all`):
    public, not the base class, and not one the package's `LIBRARY` names (what tasks build on)."""
    library = getattr(package, "LIBRARY", ())
    return not name.startswith("_") and name not in _BASE_MODULES and name not in library


def component_packages() -> list[str]:
    """Every package whose modules register components: each kind's, then every task's folder."""
    tasks = importlib.import_module(TASKS_PACKAGE)
    found = sorted(info.name for info in pkgutil.iter_modules(tasks.__path__) if info.ispkg)
    return [*KINDS.values(), *(f"{TASKS_PACKAGE}.{name}" for name in found)]


@dataclass(frozen=True)
class Component:
    """One registered `type`: its JSON Schema fragment and the function that builds it."""

    kind: str
    type: str
    description: str
    params: dict[str, dict[str, Any]]
    builder: Callable[..., Any]
    required: tuple[str, ...] = ()
    module: str = ""
    unique: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: Outputs | None = None
    reads: tuple[str, ...] = ()
    examples: Callable[..., Any] | None = None
    aliases: tuple[str, ...] = ()
    batch: tuple[str, str] | None = None
    rules: tuple[Callable[..., Any], ...] = ()
    facts: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    host_files: Callable[[dict[str, Any], str], list[tuple[str, str]]] | None = None
    checks: tuple[Callable[..., Any], ...] = ()
    build_checks: tuple[Callable[..., Any], ...] = ()
    start_checks: tuple[Callable[..., Any], ...] = ()
    predict_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_norm: Callable[[dict[str, Any]], bool] | None = None

    def schema(self) -> dict[str, Any]:
        """JSON Schema of this component's section, `type` included, no unknown keys."""
        props: dict[str, Any] = {
            "type": {"const": self.type, "description": f"Component type: {self.description}"}
        }
        props.update(self.params)
        counted = [key for key, listed in COUNTED.items() if key in self.required and listed in self.params]
        schema: dict[str, Any] = {
            "type": "object",
            "description": self.description,
            "properties": props,
            "required": ["type", *(key for key in self.required if key not in counted)],
            "additionalProperties": False,
        }
        for key in counted:  # required unless the list it counts is given (then it is that list's length)
            listed = COUNTED[key]
            description = f"{props[key].get('description', key)} Required unless `{listed}` lists them."
            schema["if"] = {"properties": {listed: {"type": "array"}}, "required": [listed]}
            schema["else"] = {"required": [key], "properties": {key: {"description": description}}}
            props[key] = {**props[key], "description": f"{props[key].get('description', key)} "
                                                       f"Left out: the length of `{listed}`."}
        schema.update(self.extra)
        return schema


_REGISTRY: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
# kind -> {old type name: the type it was renamed to}
_ALIASES: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
_LOADED = False


def _described(kind: str, type: str, builder: Callable[..., Any]) -> str:
    """The first paragraph of the builder's own docstring, on one line.

    `__doc__`, not `inspect.getdoc`: a callback class must not borrow its base class's words.
    Under `python -OO` docstrings are gone, and the type name stands in for them.
    """
    doc = builder.__doc__
    if not doc:
        if sys.flags.optimize >= 2:
            return type
        raise RegistryError(f"{kind} type {type!r} ({builder.__module__}) has no docstring: its first paragraph "
                            "says what the component does, for `dslrun list` and the schema")
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def register(
    kind: str,
    type: str,  # the YAML key is `type`
    *,
    params: dict[str, dict[str, Any]],
    description: str | None = None,
    required: tuple[str, ...] | list[str] = (),
    unique: bool = False,
    outputs: Outputs | None = None,
    reads: tuple[str, ...] | list[str] = (),
    examples: Callable[..., Any] | None = None,
    aliases: tuple[str, ...] | list[str] = (),
    batch: tuple[str, str] | None = None,
    rules: tuple[Callable[..., Any], ...] | list[Callable[..., Any]] = (),
    facts: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    host_files: Callable[[dict[str, Any], str], list[tuple[str, str]]] | None = None,
    checks: tuple[Callable[..., Any], ...] | list[Callable[..., Any]] = (),
    build_checks: tuple[Callable[..., Any], ...] | list[Callable[..., Any]] = (),
    start_checks: tuple[Callable[..., Any], ...] | list[Callable[..., Any]] = (),
    predict_options: dict[str, dict[str, Any]] | None = None,
    batch_norm: Callable[[dict[str, Any]], bool] | None = None,
    **extra: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `builder(params, context)` as the component `type` of `kind`.

    What the component does, for `dslrun list`, the schema and `validate`'s messages, is the
    first paragraph of the builder's docstring, so that it is written once, beside the code it
    describes; `description` overrides it (a plug-in that words it at import time).
    `params` maps each parameter to its JSON Schema (with `description` and, when it is
    optional, `default`); the parameters every component of the kind takes (`kind_params`,
    e.g. a callback's `priority`) are added after them. `unique` callbacks may appear once per pipeline (a second
    `checkpoint` would fight the first over the same files). `outputs(params)` names the
    phase outputs the component adds (`{"train": [...], "val": [...]}`; `outputs(params,
    pipeline)` when they depend on another section); `reads` names the
    outputs it always reads (`"val/accuracy"`), so that `dslrun validate` can tell a
    misspelt or missing output before a run starts. `examples` (inputters) lists the data
    without TensorFlow for `dslrun validate --data` (see `dsl.datacheck`). `aliases` are
    former names of the type: pipelines that use them keep working, with a warning naming
    the new one (see `renamed`). `batch` is the (features, targets) an inputter makes,
    an augmenter or a modeler takes, or the (input, prediction) a network maps, in words
    such as ("image", "class"), ("image", "mask"), ("tokens", "class"): `dslrun validate`
    refuses a pipeline whose sections disagree (None = any). `rules` are what the component
    can tell from its parameters and the pipeline's declared data shapes (`dsl.language.rules`: a U-Net's
    depth against the image size), checked by `dslrun validate`; `facts(params)` gives facts from
    parameters: an inputter's that its parameters do not say (cifar10_binary's 10 classes), or
    what an augmenter or a network tells the sections built after it (a segmentation crop, a detector's
    anchors, see dsl.language.facts). `host_files(params, cwd)`
    (inputters) names what every host must read beyond the train/val/test sources, as (path,
    "file" | "dir"), for `dslrun doctor --hosts`. `checks` are what the component can tell only
    from the whole pipeline or the machine (`check(pipeline, sources) -> [Diagnostic]`: a
    checkpoint's path, an optional package), run once by `dslrun validate` when the pipeline
    uses the type; `build_checks` what it can tell only with the built network
    (`check(pipeline, sources, model) -> [Diagnostic]`: a checkpoint matched with it by name), run
    by `dslrun validate --build`; `start_checks` what only the machine that runs can tell, just
    before the run (`check(pipeline, sources) -> [Diagnostic]`: a tracking server that must answer,
    asked with a short timeout), run by `dslrun run` before anything is built. `predict_options`
    (modelers) are the options of `dslrun predict` that shape this modeler's records, by name:
    `{"threshold": {"type": "number", "default": 0.5, "minimum": 0, "maximum": 1, "help": ...}}`
    (`"type": "flag"` for a switch); the command offers each, and refuses one the pipeline's
    modeler does not declare. `batch_norm(params)` (networks) says whether the network has batch
    normalisation, which `dslrun validate --world-size N` needs to decide on synchronising it
    before anything is built (None: its parameters say, `batch_norm: true` or
    `batch_norm_momentum`). `extra` is merged into the component's schema (e.g.
    `allOf` for cross-field rules).
    """
    if kind not in KINDS:
        raise RegistryError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
    shared = kind_params(kind)
    clashes = [name for name in shared if name in params]
    if clashes:
        raise RegistryError(
            f"{kind} type {type!r} declares {', '.join(clashes)}, which the registry adds to every {kind}; "
            "remove it from params"
        )

    declared = {**params, **shared}

    def decorator(builder: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isfunction(builder):  # a class (a callback) fills its own, subclasses too (engine/hooks.py)
            builder = _filling(builder, declared)
        for name in (type, *aliases):
            if name in _REGISTRY[kind] or name in _ALIASES[kind]:
                owner = _REGISTRY[kind].get(_ALIASES[kind].get(name, name))
                other = owner.module if owner else "?"
                raise RegistryError(f"{kind} type {name!r} is registered twice ({other} and {builder.__module__})")
        _ALIASES[kind].update(dict.fromkeys(aliases, type))
        _REGISTRY[kind][type] = Component(
            kind=kind,
            type=type,
            description=description or _described(kind, type, builder),
            params=declared,
            builder=builder,
            required=tuple(required),
            module=builder.__module__,
            unique=unique,
            extra=dict(extra),
            outputs=outputs,
            reads=tuple(reads),
            examples=examples,
            aliases=tuple(aliases),
            batch=tuple(batch) if batch else None,  # type: ignore[arg-type]
            rules=tuple(rules),
            facts=facts,
            host_files=host_files,
            checks=tuple(checks),
            build_checks=tuple(build_checks),
            start_checks=tuple(start_checks),
            predict_options=dict(predict_options or {}),
            batch_norm=batch_norm,
        )
        return builder

    return decorator


def with_defaults(params: Mapping[str, Any], schema: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """`params` with every parameter it omits set to its schema default (a deep copy of it)."""
    filled = {name: copy.deepcopy(spec["default"]) for name, spec in schema.items() if "default" in spec}
    filled.update(params)
    return filled


def _filling(builder: Callable[..., Any], schema: Mapping[str, dict[str, Any]]) -> Callable[..., Any]:
    """`builder`, given its parameters with their defaults filled, however it is called.

    The language fills them before a pipeline is built; filling them here too gives a builder
    called directly (a test, a notebook, another component) the same parameters, so no builder
    fills them itself.
    """

    @functools.wraps(builder)
    def build(params: Mapping[str, Any], context: Any) -> Any:
        return builder(with_defaults(params, schema), context)

    return build


def kind_params(kind: str) -> dict[str, dict[str, Any]]:
    """The parameters the registry adds to every component of `kind`: a callback's `priority`.

    Declared once here rather than in each component's params, so that no callback (a
    plugin's included) can forget it or describe it differently.
    """
    if kind == "callback":
        from dsl.language.priorities import PRIORITY_PARAM

        return {"priority": PRIORITY_PARAM}
    return {}


def load_all() -> None:
    """Import every component module, so that all of them have registered."""
    global _LOADED
    if _LOADED:
        return
    for package_name in component_packages():
        package = importlib.import_module(package_name)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            if is_component_module(info.name, package):
                importlib.import_module(f"{package_name}.{info.name}")
    _LOADED = True


def renamed(kind: str, type: str) -> str | None:
    """The current name of `type` when it is a former name of a `kind` type, else None."""
    load_all()
    return _ALIASES.get(kind, {}).get(type)


def lookup(kind: str, type: str) -> Component:
    """The component registered as `type` (or under a former name) of `kind`; a clear error when there is none."""
    load_all()
    try:
        return _REGISTRY[kind][_ALIASES.get(kind, {}).get(type, type)]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY.get(kind, {}))) or "none"
        raise RegistryError(
            f"no {kind} of type {type!r} is registered (known: {known}); "
            f"make sure its module is under {KINDS.get(kind, 'dsl')} or a task's folder ({TASKS_PACKAGE}.<task>), "
            "or is a plugin (--plugin MODULE), and calls register()"
        ) from None


def components(kind: str | None = None) -> list[Component]:
    """All registered components (of one kind), sorted by kind then type."""
    load_all()
    kinds = [kind] if kind else list(KINDS)
    return [_REGISTRY[k][t] for k in kinds for t in sorted(_REGISTRY[k])]


def types(kind: str) -> list[str]:
    """The registered type names of one kind, sorted."""
    load_all()
    return sorted(_REGISTRY[kind])
