"""`dslrun validate`'s rules for a pipeline's `sweep:` section.

Every value a trial can be given is checked before any trial runs, in the pipeline itself:
each parameter's path is applied the way `--set` applies it (so a path `--set` would refuse
is refused here, with the same hint), then each candidate value of its space is put there
and the pipeline is checked again, schema and cross-section rules alike. A space that can
produce `network.depth: 26` is an error at the sweep's line, not a failed trial an hour in.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

from dsl.language import backend_registry
from dsl.language.backend_registry import BackendSpec
from dsl.language.diagnostics import Diagnostic, SourceMap, is_error
from dsl.language.diagnostics import Path as JsonPath
from dsl.sweep.space import Space, override, read_spaces

# Keys of a space that only some types read.
_TYPE_KEYS = {
    "uniform": {"low", "high"},
    "log_uniform": {"low", "high"},
    "int": {"low", "high", "step", "log"},
    "choice": {"values"},
}
# Paths a trial must not change: what the sweep itself sets or reads.
_FIXED = ("sweep", "version", "extends", "runner.model_dir")


def check_sweep(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every problem of the pipeline's `sweep:` section (none when it has none)."""
    sweep = pipeline.get("sweep")
    if not isinstance(sweep, dict):
        return []
    base = {key: value for key, value in pipeline.items() if key != "sweep"}
    found: list[Diagnostic] = []
    spaces = read_spaces(sweep)
    # What the pipeline refuses whatever a trial sets (validate reports it where it is): no space's fault.
    already = {(d.path, d.message) for d in _errors(copy.deepcopy(base), sources)} if spaces else set()
    for space in spaces:
        found += _check_space(space, sweep["parameters"][space.path], base, sources, already)
    found += _check_metric(sweep, pipeline, sources)
    found += _check_method(sweep, spaces, sources)
    found += _check_slots(sweep, pipeline, sources)
    return found


def _param_path(space: Space, *more: str | int) -> JsonPath:
    return ("sweep", "parameters", space.path, *more)


def _check_space(space: Space, spec: dict[str, Any], base: dict[str, Any], sources: SourceMap,
                 already: set[tuple[str, str]]) -> list[Diagnostic]:
    found = []
    for key in sorted(set(spec) - _TYPE_KEYS[space.type] - {"type"}):
        path = _param_path(space, key)
        found.append(Diagnostic.at(sources.locate(path, key=True), path,
                                   f"a {space.type} space has no {key!r}; it reads {', '.join(sorted(_TYPE_KEYS[space.type]))}"))
    problem = space.problem()
    if problem is not None:
        path = _param_path(space, problem[0])
        found.append(sources.diagnostic(path, problem[1]))
    if found:
        return found
    where = _param_path(space)
    if space.path == "sweep" or space.path.startswith(_FIXED):
        return [Diagnostic.at(sources.locate(where, key=True), where,
                              f"a sweep cannot tune {space.path}: the sweep sets it for each trial (or it is no setting)")]
    for value in space.candidates():
        refused, problems = _try_value(base, sources, space.path, value)
        problems = [d for d in problems if refused or (d.path, d.message) not in already]
        if not problems:
            continue
        first = problems[0]
        if refused:  # the path itself: as --set would say it, at the sweep's key
            return [Diagnostic.at(sources.locate(where, key=True), where, f"{space.path}: {first.message}")]
        at = _param_path(space, *_value_key(space, value))
        shown = f"{first.path}: " if first.path and first.path != space.path else ""
        return [sources.diagnostic(
            at,
            f"the space can give {space.path} the value {value!r} ({space.where(value)}), which the pipeline refuses: "
            f"{shown}{first.message}; narrow the space to values the setting accepts",
        )]
    return []


def _value_key(space: Space, value: Any) -> tuple[str | int, ...]:
    if space.type == "choice":
        return ("values", space.values.index(value))
    if value in (space.low, space.high):
        return ("high",) if value == space.high else ("low",)
    return ("type",)


def _try_value(base: dict[str, Any], sources: SourceMap, path: str, value: Any) -> tuple[bool, list[Diagnostic]]:
    """(whether --set refuses the path itself, the errors of the pipeline with `path` set to `value` as a
    trial's --set sets it); no errors when it is valid."""
    from dsl.language.defaults import fill_defaults
    from dsl.language.resolve import Tree, apply_overrides
    from dsl.language.schema import allowed_keys

    tree = Tree(copy.deepcopy(base), SourceMap(sources.entries, sources.root))
    apply_overrides(tree, [override(path, value)], allowed_keys)
    if tree.diagnostics:
        return True, tree.diagnostics
    assert tree.value is not None
    if path.endswith(".type"):  # another component: its defaults, not the former one's
        _drop_defaults(tree.value, _json_path(path)[:-1], tree.sources)
        tree.value = fill_defaults(tree.value)
    return False, _errors(tree.value, tree.sources)


def _errors(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """The schema's errors of `pipeline`, else the errors of its cross-section rules."""
    from dsl.language.checks import run_checks
    from dsl.language.schema_errors import validate_tree

    errors = [d for d in validate_tree(pipeline, sources) if is_error(d)]
    return errors or [d for d in run_checks(pipeline, sources) if is_error(d)]


def _json_path(dotted: str) -> JsonPath:
    """'callbacks[1].every' -> ("callbacks", 1, "every")."""
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", dotted):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _drop_defaults(tree: dict[str, Any], parent: JsonPath, sources: SourceMap) -> None:
    """Remove from the mapping at `parent` the entries no file or --set wrote (fill_defaults added them)."""
    mapping: Any = tree
    for part in parent:
        mapping = mapping[part]
    if isinstance(mapping, dict):
        for key in [k for k in mapping if k != "type" and parent + (k,) not in sources]:
            del mapping[key]


def _check_metric(sweep: dict[str, Any], pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    from dsl.language.outputs import check_output_name

    path: JsonPath = ("sweep", "metric")
    problem = check_output_name(pipeline, str(sweep.get("metric", "val/loss")), path, sources)
    return [problem] if problem is not None else []


# Optuna's TPESampler draws its first trials at random (its n_startup_trials), then models them.
TPE_STARTUP_TRIALS = 10


def _check_method(sweep: dict[str, Any], spaces: list[Space], sources: SourceMap) -> list[Diagnostic]:
    if sweep.get("method", "tpe") == "tpe" and sweep.get("max_trials", 20) <= TPE_STARTUP_TRIALS:
        # A 3-trial tpe sweep was a random search, and nothing said so (trial A10).
        path: JsonPath = ("sweep", "method") if ("sweep", "method") in sources else ("sweep", "max_trials")
        return [sources.diagnostic(
            path,
            f"tpe draws its first {TPE_STARTUP_TRIALS} trials at random before it models the results "
            f"(Optuna's n_startup_trials), so these {sweep.get('max_trials', 20)} are a random search; "
            "give max_trials above 10 for tpe to search, or write method: random to say so",
            "warning")]
    if sweep.get("method") != "grid":
        return []
    continuous = [s.path for s in spaces if not s.grid()]
    if not continuous:
        return []
    path = ("sweep", "method")
    return [sources.diagnostic(
        path,
        f"a grid sweep needs choice or int spaces, but {', '.join(continuous)} "
        "is continuous; give it a choice of values, or use method: tpe or random")]


def trial_backend(pipeline: dict[str, Any]) -> BackendSpec | None:
    """The registered backend a trial runs on; None for `auto` (the launcher of ranks `auto`
    recognises when a trial has several, else one process)."""
    name = pipeline.get("runner", {}).get("backend", "auto")
    return None if name == "auto" or name not in backend_registry.names() else backend_registry.lookup(name)


def one_process_only(spec: BackendSpec | None) -> bool:
    """Whether nothing but `dslrun` itself starts this backend (no launcher of several processes)."""
    return spec is not None and spec.launch is None and set(spec.capabilities.launchers) <= {"dslrun"}


def trial_processes(pipeline: dict[str, Any]) -> int:
    """Processes one trial starts: its ranks, plus a cluster's chief and parameter server when it has them."""
    ranks = int(pipeline["sweep"].get("ranks_per_trial", 1))
    spec = trial_backend(pipeline)
    return ranks + 2 if spec is not None and spec.launch is not None and spec.launch.parameter_servers else ranks


def slots_given(sweep: dict[str, Any]) -> int | None:
    """The slots the sweep may fill, as written (slots, or the hosts' sum); None when neither is."""
    if sweep.get("slots") is not None:
        return int(sweep["slots"])
    hosts = sweep.get("hosts")
    if hosts:
        return sum(int(host.rsplit(":", 1)[1]) for host in hosts)
    return None


def available_slots(sweep: dict[str, Any]) -> int:
    return slots_given(sweep) or os.cpu_count() or 1


def _check_slots(sweep: dict[str, Any], pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    runner = pipeline.get("runner", {})
    backend = runner.get("backend", "auto")
    ranks = int(sweep.get("ranks_per_trial", 1))
    found = []
    spec = trial_backend(pipeline)
    several = [s.name for s in backend_registry.backends() if s.ranks is not None or s.launch is not None]
    auto = backend_registry.rank_launcher(backend_registry.AUTO)
    auto_launcher = f"auto ({auto.ranks.launcher})" if auto is not None and auto.ranks is not None else "auto"
    if one_process_only(spec) and ranks > 1:
        path: JsonPath = ("sweep", "ranks_per_trial")
        found.append(sources.diagnostic(
            path,
            f"runner.backend is {backend}, which runs one process, but ranks_per_trial is {ranks}; "
            f"set runner.backend: {backend_registry.either([auto_launcher, *several])}, "
            "or ranks_per_trial: 1"))
    starter = backend_registry.rank_launcher(str(backend))
    if sweep.get("hosts") and (starter is None or starter.ranks is None or not starter.ranks.places_on_hosts):
        # Trials reach the hosts through the backend's launcher (horovodrun -H); one that does not
        # place ranks on hosts would ignore them.
        placing = [s.name for s in backend_registry.backends() if s.ranks is not None and s.ranks.places_on_hosts]
        path = ("sweep", "hosts")
        found.append(sources.diagnostic(
            path,
            f"sweep.hosts places trials with a launcher that reaches other hosts, and runner.backend "
            f"{backend} has none; remove hosts, or set runner.backend: "
            f"{backend_registry.either(['auto', *placing])}"))
    slots = slots_given(sweep)
    parallel = int(sweep.get("parallel_trials", 1))
    each = trial_processes(pipeline)
    if slots is not None and parallel * each > slots:
        path = ("sweep", "parallel_trials")
        given = "sweep.slots" if sweep.get("slots") is not None else "sweep.hosts"
        found.append(sources.diagnostic(
            path,
            f"{parallel} trials at once of {each} processes each need {parallel * each} slots, but {given} gives {slots}; "
            f"lower parallel_trials to {max(1, slots // each)} or give more slots",
        ))
    if slots is not None and each > slots:
        path = ("sweep", "ranks_per_trial")
        found.append(sources.diagnostic(path, f"one trial needs {each} processes but there are {slots} slots"))
    return found
