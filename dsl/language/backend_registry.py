"""The backends a pipeline may name in `runner.backend`: their settings and what they can do.

A backend registers itself as a component does: one small module beside its code
(`backends/<name>_spec.py`, or a plugin's module loaded through the `dslrun.plugins` entry
point or `--plugin`, see dsl.language.plugins) calls `register_backend(...)` at import time with

- its settings: the `runner.<key>` sections it reads, as JSON Schema fragments (they become
  part of `schemas/pipeline.schema.json`, `dslrun list runner` and docs/components.md);
- its declared `Capabilities` (elastic, a TF_CONFIG cluster, loss scaling, sync batch norm,
  asynchronous updates, which launchers start it): `dslrun validate`'s rules, the
  composition root, `dslrun doctor`, `dslrun launch` and dsl.distributed.scaling ask these, never a
  backend's name, so a new backend is refused exactly where it cannot do what is asked;
- `create(runner_params, environ)`, which imports the backend's class (and TensorFlow)
  only when a run needs it: `dslrun validate` reads every registration without TensorFlow.

Pure Python. The built-in registrations are found by walking the `backends` package for
modules named `*_spec` (imported by name, as plugins are: no module of dsl/ but the
engine's composition root imports `backends` itself).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.errors import RegistryError

# The package whose `*_spec` modules register the built-in backends.
BUILT_IN_PACKAGE = "backends"
SPEC_SUFFIX = "_spec"

# The `runner.backend` value that picks a backend from the environment (see `auto_order`).
AUTO = "auto"

# A rule of `dslrun validate` a backend contributes about its own settings (see dsl.language.checks).
Check = Callable[[dict[str, Any], SourceMap], list[Diagnostic]]

# A capability that depends on the backend's settings: given the resolved `runner` section.
RunnerPredicate = Callable[[Mapping[str, Any]], bool]


def always(environ: Mapping[str, str]) -> bool:
    """The `auto` detector of a backend that runs in any process: `auto`'s fallback."""
    return True


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared beside its code; every field defaults to a single process.

    elastic: ranks may leave and join while the job goes on (`runner.elastic` acts on it).
    cluster: its processes form a TF_CONFIG cluster, so `eval`, `predict` and `export` read its
        checkpoints on `auto`'s fallback (one process) instead of waiting for a cluster.
    loss_scaling: `runner.precision: mixed_float16` (a dynamic loss scale) can train on it.
    sync_batch_norm: the `runner` path of its switch that synchronises batch-norm statistics
        across replicas (`"horovod.sync_batch_norm"`); None when it has none.
    asynchronous: each optimizer update is one replica's batch (a parameter-server cluster):
        dsl.distributed.scaling then scales neither the batch nor the learning rate. A predicate of the
        `runner` section when it depends on the backend's settings.
    exclusive_settings: its settings sections, changed from their defaults, are an error on
        another backend (they would be silently ignored there).
    launchers: what starts its processes, in words (`horovodrun`, `mpirun`, `dslrun launch`).
    """

    elastic: bool = False
    cluster: bool = False
    loss_scaling: bool = True
    sync_batch_norm: str | None = None
    asynchronous: bool | RunnerPredicate = False
    exclusive_settings: bool = False
    launchers: tuple[str, ...] = ("dslrun",)


@dataclass(frozen=True)
class ClusterLaunch:
    """How `dslrun launch --backend NAME` starts a cluster of this backend (TF_CONFIG per task).

    settings: the `--set` overrides that make a pipeline run as one task of the cluster.
    parameter_servers: the cluster has ps tasks (and may have an evaluator) beside the chief
        and the workers, which serve until the chief ends; without, every task trains (the
        chief and `--workers` - 1 workers) and ends on its own when training ends.
    help: the choice in `dslrun launch --help`, e.g. "ps (TensorFlow parameter servers)".
    default: `dslrun launch` starts this backend when `--backend` is not given.
    """

    settings: tuple[str, ...]
    parameter_servers: bool
    help: str
    default: bool = False


@dataclass(frozen=True)
class RanksLaunch:
    """How this backend's launcher starts N ranks of one command: what `dslrun sweep` runs for a
    trial of `ranks_per_trial` processes (and for one-rank trials placed on `sweep.hosts`).

    launcher: its name in messages ("horovodrun").
    command(ranks, hosts, network_interfaces, argv): the whole command line; `hosts` as
        host:slots (empty: this machine), `argv` the dslrun command each rank runs.
    places_on_hosts: it reaches other hosts itself (over ssh), so `sweep.hosts` can place trials.
    """

    launcher: str
    command: Callable[[int, Sequence[str], str | None, Sequence[str]], list[str]]
    places_on_hosts: bool = False


@dataclass(frozen=True)
class StackReport:
    """What `dslrun doctor` reports of the library a backend runs on (Horovod's build, say).

    key: its entry in doctor's facts (`dslrun doctor --json`), and the facts `doctor(facts)` reads.
    collect(): those facts, importing the library (None: it is not installed or does not import).
    report(collected): the lines of doctor's table about it (`collected` may be None).
    """

    key: str
    collect: Callable[[], dict[str, Any] | None]
    report: Callable[[dict[str, Any] | None], list[str]]


@dataclass(frozen=True)
class BackendSpec:
    """One registered `runner.backend` value."""

    name: str
    summary: str  # the phrase of the schema's `runner.backend` description: "one process"
    title: str  # how messages name what it runs on: "Horovod"
    create: Callable[[dict[str, Any], Mapping[str, str] | None], Any]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    capabilities: Capabilities = Capabilities()
    order: int = 100
    auto: Callable[[Mapping[str, str]], bool] | None = None
    auto_summary: str = ""  # "Horovod when started by horovodrun/mpirun", or "local otherwise" for the fallback
    doctor: Callable[[dict[str, Any]], str | None] | None = None
    launch: ClusterLaunch | None = None
    ranks: RanksLaunch | None = None
    rank: Callable[[Mapping[str, str]], tuple[int, int] | None] | None = None
    stack: StackReport | None = None
    refusals: dict[str, str] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    module: str = ""

    def can(self, capability: str, runner: Mapping[str, Any] | None = None) -> bool:
        """Whether this backend has `capability` (a field of `Capabilities`) with these `runner` settings."""
        value = getattr(self.capabilities, capability)
        if callable(value):
            return bool(value(runner or {}))
        return bool(value)

    def refusal(self, capability: str) -> str:
        """Why it lacks `capability`, as the rest of a sentence ("which {refusal}")."""
        return self.refusals.get(capability, f"the {self.name} backend does not support")

    def defaults(self, key: str) -> dict[str, Any]:
        """The defaults of the settings section `runner.<key>` (its properties' `default`s)."""
        return {name: prop["default"] for name, prop in self.settings[key].get("properties", {}).items()
                if "default" in prop}


_BACKENDS: dict[str, BackendSpec] = {}
_LOADED = False


def register_backend(
    name: str,
    *,
    summary: str,
    title: str,
    create: Callable[[dict[str, Any], Mapping[str, str] | None], Any],
    settings: dict[str, dict[str, Any]] | None = None,
    capabilities: Capabilities | None = None,
    order: int = 100,
    auto: Callable[[Mapping[str, str]], bool] | None = None,
    auto_summary: str = "",
    doctor: Callable[[dict[str, Any]], str | None] | None = None,
    launch: ClusterLaunch | None = None,
    ranks: RanksLaunch | None = None,
    rank: Callable[[Mapping[str, str]], tuple[int, int] | None] | None = None,
    stack: StackReport | None = None,
    refusals: dict[str, str] | None = None,
    checks: tuple[Check, ...] | list[Check] = (),
) -> BackendSpec:
    """Register the backend `name` (see the module docstring); a clash with another raises.

    `order` places it in the schema's description, `dslrun doctor` and messages (plugins
    after the built-ins by default). `auto(environ)` tells whether `runner.backend: auto`
    picks it (its launcher started this process); `always` marks the fallback. `doctor(facts)`
    returns why it cannot run on this installation (None: it can), from the facts `dslrun
    doctor` collected. `launch` says how `dslrun launch` starts a cluster of it, `ranks` how its
    launcher starts N ranks of a command (a sweep's trials), `rank(environ)` which (rank, size)
    this process is when its launcher started it (None otherwise; errors name the rank), `stack`
    what `dslrun doctor` collects and reports of the library it runs on.
    `refusals` words why a capability is missing (see `refusal`).
    `checks` are its own `dslrun validate` rules about its settings.
    """
    module = getattr(create, "__module__", "") or ""
    if name == AUTO or name in _BACKENDS:
        other = _BACKENDS[name].module if name in _BACKENDS else "dslrun itself"
        raise RegistryError(f"backend {name!r} is registered twice ({other} and {module})")
    owned = {key: spec.name for spec in _BACKENDS.values() for key in spec.settings}
    clashes = sorted(key for key in settings or {} if key in owned)
    if clashes:
        raise RegistryError(f"backend {name!r} declares runner.{clashes[0]}, which backend "
                            f"{owned[clashes[0]]!r} already declares ({module})")
    spec = BackendSpec(name=name, summary=summary, title=title, create=create, settings=dict(settings or {}),
                       capabilities=capabilities or Capabilities(), order=order, auto=auto,
                       auto_summary=auto_summary, doctor=doctor, launch=launch, ranks=ranks, rank=rank, stack=stack,
                       refusals=dict(refusals or {}),
                       checks=tuple(checks), module=module)
    _BACKENDS[name] = spec
    return spec


def load_all() -> None:
    """Import every built-in backend registration (`backends/*_spec.py`)."""
    global _LOADED
    if _LOADED:
        return
    package = importlib.import_module(BUILT_IN_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.endswith(SPEC_SUFFIX) and not info.name.startswith("_"):
            importlib.import_module(f"{BUILT_IN_PACKAGE}.{info.name}")
    _LOADED = True


def backends() -> list[BackendSpec]:
    """Every registered backend, in their declared order (then by name)."""
    load_all()
    return sorted(_BACKENDS.values(), key=lambda spec: (spec.order, spec.name))


def names() -> list[str]:
    """The registered backend names, in order."""
    return [spec.name for spec in backends()]


def lookup(name: str) -> BackendSpec:
    """The backend registered as `name`; a clear error when there is none."""
    load_all()
    try:
        return _BACKENDS[name]
    except KeyError:
        raise RegistryError(
            f"no backend {name!r} is registered (known: {', '.join(names())}); make sure its module is "
            f"under backends/ as <name>{SPEC_SUFFIX}.py, or its plugin is installed, and calls register_backend()"
        ) from None


def auto_order() -> list[BackendSpec]:
    """The backends `auto` may pick, in the order it tries them: those whose launcher it can
    tell from the environment first, the fallback that runs anywhere (`always`) last."""
    return sorted((spec for spec in backends() if spec.auto is not None),
                  key=lambda spec: (spec.auto is always, spec.order, spec.name))


def resolve(name: str, environ: Mapping[str, str]) -> BackendSpec:
    """The backend `runner.backend: name` runs on here (`auto` read from `environ`)."""
    if name != AUTO:
        return lookup(name)
    for spec in auto_order():
        assert spec.auto is not None
        if spec.auto(environ):
            return spec
    raise RegistryError("runner.backend is auto, but no registered backend runs in a plain process")


def fallback() -> BackendSpec:
    """The backend `auto` picks when no launcher started this process (one process)."""
    return auto_order()[-1]


def candidates(runner: Mapping[str, Any]) -> list[BackendSpec]:
    """The backends `runner.backend` may run on: the one it names, or every one `auto` may pick.

    Empty for a name nobody registered (the schema reports it).
    """
    name = runner.get("backend", AUTO)
    if name == AUTO:
        return auto_order()
    load_all()
    return [_BACKENDS[name]] if isinstance(name, str) and name in _BACKENDS else []


def with_capability(capability: str, runner: Mapping[str, Any] | None = None) -> list[BackendSpec]:
    """The backends that have `capability`, in order."""
    return [spec for spec in backends() if spec.can(capability, runner)]


def either(names: list[str]) -> str:
    """`a`, `a or b`, `a, b or c`: alternatives in a message."""
    return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"


def rank_launcher(name: str) -> BackendSpec | None:
    """The backend whose launcher starts the ranks of a `runner.backend: name` pipeline: the one
    named, if it has a launcher of ranks; for `auto`, the first that `auto` recognises and that
    has one (Horovod's horovodrun among the built-ins)."""
    if name != AUTO:
        spec = lookup(name) if name in names() else None
        return spec if spec is not None and spec.ranks is not None else None
    return next((spec for spec in auto_order() if spec.ranks is not None), None)


def rank_of(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, size) of this process when a backend's launcher started it as one of several ranks."""
    for spec in backends():
        found = spec.rank(environ) if spec.rank is not None else None
        if found is not None and found[1] > 1:
            return found
    return None
