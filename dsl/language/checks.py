"""Rules a JSON Schema cannot say: they relate values in different places of the pipeline.

Each check reads the resolved pipeline (schema-valid, defaults filled) and returns located
diagnostics, so `dslrun validate` catches at once what would otherwise fail minutes into a
run (a val phase without val data) or silently do the wrong thing (two checkpoint
callbacks writing the same files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl.language import backend_registry, registry
from dsl.language.diagnostics import Diagnostic, SourceMap, format_path
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import RegistryError
from dsl.language.facts import batch_words
from dsl.language.outputs import check_phase_outputs
from dsl.language.rules import declare, dotted
from dsl.language.schedule_length import check_schedule_length

Check = Callable[[dict[str, Any], SourceMap], list[Diagnostic]]


def run_checks(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every semantic problem of a schema-valid, defaults-filled pipeline."""
    found: list[Diagnostic] = []
    for check in CHECKS:
        found.extend(check(pipeline, sources))
    return found


def written_at(sources: SourceMap, path: JsonPath) -> str:
    """Where `path` was written, as file:line, or "the default" when no file wrote it (for a
    message that points at a second place; a backend's own rules use it too)."""
    if path not in sources:
        return "the default"
    where = sources.locate(path)
    return f"{where.file}:{where.line}"


_line = written_at


def check_training_length(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Exactly one of runner.max_epochs and runner.max_iters."""
    runner = pipeline.get("runner", {})
    epochs, iters = runner.get("max_epochs"), runner.get("max_iters")
    if epochs is None and iters is None:
        return [
            Diagnostic.at(
                sources.locate(("runner",), key=True),
                ("runner",),
                "give the length of training: set runner.max_epochs (epoch-based) or runner.max_iters (iter-based)",
            )
        ]
    if epochs is not None and iters is not None:
        return [
            Diagnostic.at(
                sources.locate(("runner", "max_iters"), key=True),
                ("runner", "max_iters"),
                f"give only one of runner.max_epochs ({_line(sources, ('runner', 'max_epochs'))}) "
                "and runner.max_iters; set the other to null",
            )
        ]
    return []


def check_workflow(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A workflow must train: without a train phase max_epochs / max_iters is never reached."""
    workflow = pipeline.get("runner", {}).get("workflow") or []
    path = ("runner", "workflow")
    if "train" not in [phase[0] for phase in workflow]:
        return [sources.diagnostic(path, "the workflow has no train phase, so training would never end; add [train, 1]")]
    return []


def check_data_for_modes(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every workflow mode needs data: an inputter mode set to null cannot serve a phase."""
    inputter = pipeline.get("inputter", {})
    component = _component("inputter", inputter.get("type"))
    if component is None:
        return []
    found = []
    workflow = pipeline.get("runner", {}).get("workflow") or []
    reported: set[str] = set()
    for index, phase in enumerate(workflow):
        mode = phase[0]
        why = _no_data(inputter, component, mode, sources)
        if why and mode not in reported:
            reported.add(mode)
            path: JsonPath = ("runner", "workflow", index)
            found.append(
                sources.diagnostic(
                    path,
                    f"the workflow has a {mode} phase, but {why}; give the inputter {mode} data "
                    f"or remove [{mode}, {phase[1]}] from runner.workflow",
                )
            )
    val_steps = pipeline.get("runner", {}).get("val_steps")
    if val_steps is not None and workflow and "val" not in [p[0] for p in workflow]:
        path = ("runner", "val_steps")
        found.append(
            Diagnostic.at(
                sources.locate(path),
                path,
                "runner.val_steps is set but the workflow has no val phase; add [val, 1] to runner.workflow",
                severity="warning",
            )
        )
    return found


def _no_data(inputter: dict[str, Any], component: registry.Component, mode: str, sources: SourceMap) -> str | None:
    """Why the inputter has no data for `mode` (its `mode` source is null, or 0 examples), or None."""
    if mode in component.params and inputter.get(mode) is None:
        return f"inputter.{mode} is null ({_line(sources, ('inputter', mode))})"
    counts = inputter.get("num_examples")
    if isinstance(counts, dict) and counts.get(mode) == 0:
        return f"inputter.num_examples.{mode} is 0 ({_line(sources, ('inputter', 'num_examples', mode))})"
    return None


def check_shared_facts(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """num_classes and image_shape, when both the inputter and the network give them, agree."""
    found = []
    for key in ("num_classes", "image_shape"):
        given = pipeline.get("inputter", {}).get(key)
        wanted = pipeline.get("network", {}).get(key)
        if given is not None and wanted is not None and given != wanted:
            path = ("network", key)
            found.append(
                sources.diagnostic(
                    path,
                    f"network.{key} is {wanted} but inputter.{key} is {given} ({_line(sources, ('inputter', key))}); "
                    f"make them agree, or set network.{key}: null to take it from the inputter",
                )
            )
    return found


def check_batch_kinds(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Inputter, augmenter, network and modeler agree on what a batch holds: (image, class),
    (image, mask), (tokens, class)... as each component's `batch` declares it."""
    declared = []
    for kind in ("inputter", "augmenter", "network", "modeler"):
        section = pipeline.get(kind)
        component = _component(kind, section.get("type")) if isinstance(section, dict) else None
        if component is not None and component.batch and isinstance(section, dict):
            declared.append((kind, section["type"], component.batch))
    if not declared:
        return []
    kind0, type0, batch0 = declared[0]
    found = []
    for kind, type_name, batch in declared[1:]:
        if batch == batch0:
            continue
        fitting = sorted(c.type for c in registry.components(kind) if c.batch in (None, batch0))
        path: JsonPath = (kind, "type")
        found.append(sources.diagnostic(
            path,
            f"{kind} {type_name!r} works on {_describe_batch(batch)}, but {kind0} {type0!r} "
            f"({_line(sources, (kind0, 'type'))}) gives {_describe_batch(batch0)}; "
            f"{kind} types for that: {', '.join(fitting) or 'none registered'}",
        ))
    return found


def _describe_batch(batch: tuple[str, str]) -> str:
    features, targets = batch
    word = batch_words().get(targets)
    return f"{features} -> {word.meaning if word is not None else targets}"


def check_unique_callbacks(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A `unique` callback (checkpoint, ...) appears at most once."""
    first: dict[str, int] = {}
    found = []
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        kind = callback.get("type")
        component = _component("callback", kind)
        if component is None or not component.unique:
            continue
        if kind in first:
            path = ("callbacks", index, "type")
            earlier = ("callbacks", first[kind], "type")
            found.append(
                sources.diagnostic(
                    path,
                    f"the {kind} callback may appear only once; it is also {format_path(earlier)} "
                    f"({_line(sources, earlier)}); remove one of them",
                )
            )
        else:
            first[kind] = index
    return found


def check_lr_schedule(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A piecewise schedule: boundaries strictly increasing, one more value than boundaries."""
    schedule = pipeline.get("modeler", {}).get("lr_schedule")
    if not isinstance(schedule, dict) or schedule.get("type") != "piecewise":
        return []
    base: JsonPath = ("modeler", "lr_schedule")
    boundaries = schedule.get("boundaries") or []
    values = schedule.get("values") or []
    found = []
    for index in range(1, len(boundaries)):
        if not boundaries[index] > boundaries[index - 1]:
            path = base + ("boundaries", index)
            found.append(
                sources.diagnostic(
                    path,
                    f"boundaries must be strictly increasing: {boundaries[index]} follows {boundaries[index - 1]}",
                )
            )
    if isinstance(schedule.get("values"), list) and len(values) != len(boundaries) + 1:
        path = base + ("values",)
        found.append(
            sources.diagnostic(
                path,
                f"a piecewise schedule needs one value per interval: {len(boundaries)} boundaries make "
                f"{len(boundaries) + 1} intervals, but {len(values)} values are given",
            )
        )
    return found


def check_elastic(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.elastic: a worker range that can hold, on a backend that can change size (its capability)."""
    runner = pipeline.get("runner", {})
    elastic = runner.get("elastic")
    if not isinstance(elastic, dict):
        return []
    found = []
    backend = runner.get("backend", "auto")
    running = backend_registry.candidates(runner)
    if running and not any(spec.can("elastic", runner) for spec in running):
        capable = backend_registry.with_capability("elastic", runner)
        path: JsonPath = ("runner", "elastic")
        found.append(Diagnostic.at(
            sources.locate(path, key=True), path,
            f"runner.elastic needs {backend_registry.either([spec.title for spec in capable])}, but runner.backend is "
            f"{backend} ({_line(sources, ('runner', 'backend'))}); set runner.backend: {_choices(capable)}, "
            "or remove runner.elastic",
        ))
    low, high = elastic.get("min_workers", 1), elastic.get("max_workers")
    if isinstance(high, int) and isinstance(low, int) and high < low:
        path = ("runner", "elastic", "max_workers")
        found.append(sources.diagnostic(
            path,
            f"max_workers {high} is below min_workers {low} ({_line(sources, ('runner', 'elastic', 'min_workers'))})",
        ))
    return found


def check_precision(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.precision mixed_float16 needs loss scaling, which some backends cannot do (their capability)."""
    runner = pipeline.get("runner", {})
    running = backend_registry.candidates(runner)
    if runner.get("precision") != "mixed_float16" or not running or any(s.can("loss_scaling", runner) for s in running):
        return []
    capable = [spec.name for spec in backend_registry.auto_order() if spec.can("loss_scaling", runner)]
    path: JsonPath = ("runner", "precision")
    return [sources.diagnostic(
        path,
        f"mixed_float16 needs loss scaling, which {running[0].refusal('loss_scaling')} "
        f"(runner.backend is {runner.get('backend')}, {_line(sources, ('runner', 'backend'))}); use mixed_bfloat16, or "
        f"runner.backend: {backend_registry.either(capable)}",
    )]


def check_sync_batch_norm(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A backend's sync_batch_norm switch acts on that backend's replicas only: a backend that cannot
    synchronise batch norm would ignore it, and one that can reads its own switch.

    The switch of a backend with `exclusive_settings` is reported with the rest of its
    settings (check_backend_settings).
    """
    runner = pipeline.get("runner", {})
    running = backend_registry.candidates(runner)
    backend = runner.get("backend", "auto")
    found = []
    for owner in backend_registry.backends():
        switch = owner.capabilities.sync_batch_norm
        if not running or switch is None or owner.capabilities.exclusive_settings or owner in running:
            continue
        key, _, leaf = switch.partition(".")
        section = runner.get(key)
        if not isinstance(section, dict) or section.get(leaf) is not True:
            continue
        path: JsonPath = ("runner", key, leaf)
        own = [spec.capabilities.sync_batch_norm for spec in running if spec.capabilities.sync_batch_norm]
        if own:
            message = (f"runner.backend is {backend} ({_line(sources, ('runner', 'backend'))}), which does not read "
                       f"runner.{key}; set runner.{own[0]}: true instead")
        else:
            message = (f"{leaf} synchronises {owner.title} ranks, but runner.backend is {backend} "
                       f"({_line(sources, ('runner', 'backend'))}), so it would have no effect; set runner.backend: "
                       f"{_choices([owner])}, or remove it")
        found.append(sources.diagnostic(path, message))
    return found


def check_backend_settings(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """The settings of a backend with `exclusive_settings` act on that backend only.

    Settings equal to their defaults are no error: `dslrun show` writes every default out.
    """
    runner = pipeline.get("runner", {})
    backend = runner.get("backend", "auto")
    found = []
    for owner in backend_registry.backends():
        if not owner.capabilities.exclusive_settings or backend == owner.name:
            continue
        for key in owner.settings:
            defaults = owner.defaults(key)
            section = runner.get(key)
            changed = sorted(name for name, value in (section if isinstance(section, dict) else {}).items()
                             if name in defaults and value != defaults[name])
            if not changed:
                continue
            start = f" (and start it with `dslrun launch --backend {owner.name}`)" if owner.launch else ""
            path: JsonPath = ("runner", key, changed[0])
            found.append(Diagnostic.at(
                sources.locate(path, key=True), path,
                f"runner.{key} configures the {owner.name} backend, but runner.backend is {backend} "
                f"({_line(sources, ('runner', 'backend'))}), so {', '.join(changed)} would have no effect; set "
                f"runner.backend: {owner.name}{start}, or remove them",
            ))
    return found


def check_backends_own_rules(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """The rules each registered backend declares about its own settings (e.g. the ps cluster's cache)."""
    return [found for spec in backend_registry.backends() for check in spec.checks for found in check(pipeline, sources)]


def _choices(capable: list[backend_registry.BackendSpec]) -> str:
    """The `runner.backend` values that run on one of `capable`: their names, and `auto` when it may pick one."""
    auto = {spec.name for spec in backend_registry.auto_order()}
    names = [spec.name for spec in capable]
    return backend_registry.either(names + [backend_registry.AUTO] * any(name in auto for name in names))


def check_lr_scaling(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.lr_scaling follows the growth of the global batch, which batch_scaling none never grows.

    A pipeline written when `batch_size` was per rank and the rate scaled with the ranks
    (`lr_scaling: linear`) now trains with the global batch of one process: say so at the line.
    """
    runner = pipeline.get("runner", {})
    rule = runner.get("lr_scaling")
    if rule not in ("linear", "sqrt") or runner.get("batch_scaling", "none") != "none":
        return []
    path: JsonPath = ("runner", "lr_scaling")
    return [sources.diagnostic(
        path,
        f"lr_scaling {rule} has no effect with runner.batch_scaling: none (the default): inputter.batch_size is the "
        "global batch the ranks share, so the rate of one process is kept at every size; set runner.batch_scaling: "
        "linear for a batch per rank and a scaled rate, or remove lr_scaling",
        "warning",
    )]


def check_component_rules(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each section's own rules (`register(rules=...)`, see dsl.language.rules) against the declared data
    shapes: a U-Net's depth and the image size, three `classes` for four, a filter wider than a text."""
    inputter = pipeline.get("inputter")
    source = _component("inputter", inputter.get("type")) if isinstance(inputter, dict) else None
    declared = declare(pipeline, source.facts if source is not None else None)
    found = []
    for path, kind, section in _sections(pipeline):
        component = _component(kind, section.get("type"))
        for rule in component.rules if component is not None else ():
            for problem in rule(section, declared):
                at = path + problem.key
                other = _line(sources, problem.other) if problem.other is not None else ""
                message = problem.message.replace("{other}", other) + _inherited(sources, at)
                found.append(sources.diagnostic(at, message))
    return found


def _inherited(sources: SourceMap, at: JsonPath) -> str:
    """`; inputter.classes comes from base.yaml, which this file extends: ...` when the value a rule
    refuses was written in a base file: trial A12 changed num_classes in its own file, was sent to
    the base's `classes` line and told to change num_classes back."""
    where, top = sources.inherited_from(at), sources.root
    if where is None:
        return ""
    return f"; {dotted(at)} comes from {where.file}, which {top.file} extends: set it in {top.file} to change it"


def check_components_own(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each used type's own checks of the whole pipeline (`register(checks=...)`), once per type:
    an init_checkpoint's file, the package the mlflow callback needs, a classifier's top_k."""
    return [found for component in used_components(pipeline) for check in component.checks
            for found in check(pipeline, sources)]


def check_before_start(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each used type's checks of the machine that runs (`register(start_checks=...)`), once per
    type, just before `dslrun run` builds anything: a tracking server that must answer."""
    return [found for component in used_components(pipeline) for check in component.start_checks
            for found in check(pipeline, sources)]


def used_components(pipeline: dict[str, Any]) -> list[registry.Component]:
    """Every registered type the pipeline uses, once each, in section order (unknown types left out)."""
    found: dict[tuple[str, str], registry.Component] = {}
    for _, kind, section in _sections(pipeline):
        component = _component(kind, section.get("type"))
        if component is not None:
            found.setdefault((kind, component.type), component)
    return list(found.values())


def _sections(pipeline: dict[str, Any]) -> list[tuple[JsonPath, str, dict[str, Any]]]:
    """(path, kind, parameters) of every component section of the pipeline."""
    found: list[tuple[JsonPath, str, dict[str, Any]]] = []
    for kind in ("inputter", "augmenter", "network", "modeler"):
        if isinstance(pipeline.get(kind), dict):
            found.append(((kind,), kind, pipeline[kind]))
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if isinstance(callback, dict):
            found.append((("callbacks", index), "callback", callback))
    return found


def _component(kind: str, type_name: Any) -> registry.Component | None:
    if not isinstance(type_name, str):
        return None
    try:
        return registry.lookup(kind, type_name)
    except RegistryError:
        return None


CHECKS: list[Check] = [
    check_training_length,
    check_workflow,
    check_data_for_modes,
    check_shared_facts,
    check_batch_kinds,
    check_unique_callbacks,
    check_lr_schedule,
    check_elastic,
    check_precision,
    check_sync_batch_norm,
    check_backend_settings,
    check_backends_own_rules,
    check_lr_scaling,
    check_component_rules,
    check_phase_outputs,
    check_schedule_length,
    check_components_own,
]
