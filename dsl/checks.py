"""Rules a JSON Schema cannot say: they relate values in different places of the pipeline.

Each check reads the resolved pipeline (schema-valid, defaults filled) and returns located
diagnostics, so `dslrun validate` catches at once what would otherwise fail minutes into a
run (a val phase without val data) or silently do the wrong thing (two checkpoint
callbacks writing the same files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl import registry
from dsl.diagnostics import Diagnostic, SourceMap, format_path
from dsl.diagnostics import Path as JsonPath
from dsl.outputs import check_phase_outputs
from dsl.rules import declare
from dsl.schedule_length import check_schedule_length
from dsl.sections import RUNNER_PARAMS

Check = Callable[[dict[str, Any], SourceMap], list[Diagnostic]]


def run_checks(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every semantic problem of a schema-valid, defaults-filled pipeline."""
    found: list[Diagnostic] = []
    for check in CHECKS:
        found.extend(check(pipeline, sources))
    return found


def _line(sources: SourceMap, path: JsonPath) -> str:
    """Where `path` was written, as file:line, or "the default" when no file wrote it."""
    if path not in sources:
        return "the default"
    where = sources.locate(path)
    return f"{where.file}:{where.line}"


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
        return [Diagnostic.at(sources.locate(path), path, "the workflow has no train phase, so training would never end; add [train, 1]")]
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
            path = ("runner", "workflow", index)
            found.append(
                Diagnostic.at(
                    sources.locate(path),
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
                Diagnostic.at(
                    sources.locate(path),
                    path,
                    f"network.{key} is {wanted} but inputter.{key} is {given} ({_line(sources, ('inputter', key))}); "
                    f"make them agree, or set network.{key}: null to take it from the inputter",
                )
            )
    return found


_BATCH_WORDS = {"class": "one class per example", "mask": "a class per pixel (a mask)"}


def check_batch_kinds(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Inputter, augmenter, network and modeler agree on what a batch holds: (image, class),
    (image, mask), (tokens, class)... as each component's `batch` declares it."""
    declared = []
    for kind in ("inputter", "augmenter", "network", "modeler"):
        section = pipeline.get(kind)
        component = _component(kind, section.get("type")) if isinstance(section, dict) else None
        if component is not None and component.batch:
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
        found.append(Diagnostic.at(
            sources.locate(path), path,
            f"{kind} {type_name!r} works on {_describe_batch(batch)}, but {kind0} {type0!r} "
            f"({_line(sources, (kind0, 'type'))}) gives {_describe_batch(batch0)}; "
            f"{kind} types for that: {', '.join(fitting) or 'none registered'}",
        ))
    return found


def _describe_batch(batch: tuple[str, str]) -> str:
    features, targets = batch
    return f"{features} -> {_BATCH_WORDS.get(targets, targets)}"


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
                Diagnostic.at(
                    sources.locate(path),
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
                Diagnostic.at(
                    sources.locate(path),
                    path,
                    f"boundaries must be strictly increasing: {boundaries[index]} follows {boundaries[index - 1]}",
                )
            )
    if isinstance(schedule.get("values"), list) and len(values) != len(boundaries) + 1:
        path = base + ("values",)
        found.append(
            Diagnostic.at(
                sources.locate(path),
                path,
                f"a piecewise schedule needs one value per interval: {len(boundaries)} boundaries make "
                f"{len(boundaries) + 1} intervals, but {len(values)} values are given",
            )
        )
    return found


def check_elastic(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.elastic: a worker range that can hold, on a backend that can change size."""
    runner = pipeline.get("runner", {})
    elastic = runner.get("elastic")
    if not isinstance(elastic, dict):
        return []
    found = []
    backend = runner.get("backend", "auto")
    if backend in ("local", "ps", "collective"):
        path: JsonPath = ("runner", "elastic")
        found.append(Diagnostic.at(
            sources.locate(path, key=True), path,
            f"runner.elastic needs Horovod, but runner.backend is {backend} "
            f"({_line(sources, ('runner', 'backend'))}); set runner.backend: horovod or auto, or remove runner.elastic",
        ))
    low, high = elastic.get("min_workers", 1), elastic.get("max_workers")
    if isinstance(high, int) and isinstance(low, int) and high < low:
        path = ("runner", "elastic", "max_workers")
        found.append(Diagnostic.at(
            sources.locate(path), path,
            f"max_workers {high} is below min_workers {low} ({_line(sources, ('runner', 'elastic', 'min_workers'))})",
        ))
    return found


def check_precision(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.precision mixed_float16 needs loss scaling, which TensorFlow refuses under parameter servers."""
    runner = pipeline.get("runner", {})
    if runner.get("precision") != "mixed_float16" or runner.get("backend") != "ps":
        return []
    path: JsonPath = ("runner", "precision")
    return [Diagnostic.at(
        sources.locate(path), path,
        f"mixed_float16 needs loss scaling, which TensorFlow does not support with parameter servers "
        f"(runner.backend is ps, {_line(sources, ('runner', 'backend'))}); use mixed_bfloat16, or "
        "runner.backend: horovod or local",
    )]


def check_sync_batch_norm(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.horovod.sync_batch_norm acts on Horovod ranks only: on another backend it would be ignored."""
    runner = pipeline.get("runner", {})
    horovod = runner.get("horovod")
    backend = runner.get("backend", "auto")
    if not isinstance(horovod, dict) or horovod.get("sync_batch_norm") is not True or backend not in ("local", "ps"):
        return []
    path: JsonPath = ("runner", "horovod", "sync_batch_norm")
    return [Diagnostic.at(
        sources.locate(path), path,
        f"sync_batch_norm synchronises Horovod ranks, but runner.backend is {backend} "
        f"({_line(sources, ('runner', 'backend'))}), so it would have no effect; set runner.backend: horovod "
        "or auto, or remove it",
    )]


def check_ps_cluster_cache(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """inputter.cache cannot run on a ps cluster: each worker builds its data inside a graph,
    where the up-front cache pass cannot run."""
    runner = pipeline.get("runner", {})
    ps = runner.get("ps")
    cache = pipeline.get("inputter", {}).get("cache")
    if runner.get("backend") != "ps" or not isinstance(ps, dict) or ps.get("mode") != "cluster" or cache is not True:
        return []
    path: JsonPath = ("inputter", "cache")
    return [Diagnostic.at(
        sources.locate(path), path,
        f"inputter.cache: true is not supported by runner.ps.mode: cluster ({_line(sources, ('runner', 'ps', 'mode'))}): "
        "each worker builds its own data in a graph, where the up-front cache pass cannot run; set inputter.cache: false",
    )]


def check_collective(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """runner.collective acts on the collective backend only; Horovod's sync_batch_norm has its own key there.

    Settings equal to their defaults are no error: `dslrun show` writes every default out.
    """
    runner = pipeline.get("runner", {})
    backend = runner.get("backend", "auto")
    found = []
    defaults = {key: prop["default"] for key, prop in RUNNER_PARAMS["collective"]["properties"].items()}
    collective = runner.get("collective")
    changed = sorted(key for key, value in (collective if isinstance(collective, dict) else {}).items()
                     if key in defaults and value != defaults[key])
    if backend != "collective" and changed:
        path: JsonPath = ("runner", "collective", changed[0])
        found.append(Diagnostic.at(
            sources.locate(path, key=True), path,
            f"runner.collective configures the collective backend, but runner.backend is {backend} "
            f"({_line(sources, ('runner', 'backend'))}), so {', '.join(changed)} would have no effect; set "
            "runner.backend: collective (and start it with `dslrun launch --backend collective`), or remove them",
        ))
    horovod = runner.get("horovod")
    if backend == "collective" and isinstance(horovod, dict) and horovod.get("sync_batch_norm") is True:
        path = ("runner", "horovod", "sync_batch_norm")
        found.append(Diagnostic.at(
            sources.locate(path), path,
            f"runner.backend is collective ({_line(sources, ('runner', 'backend'))}), which does not read "
            "runner.horovod; set runner.collective.sync_batch_norm: true instead",
        ))
    return found


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
    return [Diagnostic.at(
        sources.locate(path), path,
        f"lr_scaling {rule} has no effect with runner.batch_scaling: none (the default): inputter.batch_size is the "
        "global batch the ranks share, so the rate of one process is kept at every size; set runner.batch_scaling: "
        "linear for a batch per rank and a scaled rate, or remove lr_scaling",
        "warning",
    )]


def check_top_k(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """modeler.top_k below the number of classes: top-k of k classes or more is always 1."""
    modeler = pipeline.get("modeler", {})
    classes = pipeline.get("inputter", {}).get("num_classes") or pipeline.get("network", {}).get("num_classes")
    found = []
    for index, k in enumerate(modeler.get("top_k") or []):
        if isinstance(classes, int) and isinstance(k, int) and k >= classes:
            path: JsonPath = ("modeler", "top_k", index)
            found.append(Diagnostic.at(
                sources.locate(path), path,
                f"top_{k}_accuracy is always 1 with {classes} classes; use values below {classes}, or remove it",
            ))
    return found


def check_component_rules(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each section's own rules (`register(rules=...)`, see dsl.rules) against the declared data
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
                found.append(Diagnostic.at(sources.locate(at), at, problem.message.replace("{other}", other)))
    return found


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
    except registry.RegistryError:
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
    check_collective,
    check_lr_scaling,
    check_ps_cluster_cache,
    check_top_k,
    check_component_rules,
    check_phase_outputs,
    check_schedule_length,
]
