"""Phase outputs: what each phase of a pipeline produces, and which of them its sections read.

`checkpoint.save_best.monitor: val/acc` used to fail after a whole train epoch, when the val
phase turned out to produce `accuracy`, not `acc`. Components declare both sides in the
registry — the outputs they add (`register(outputs=...)`), the outputs they always read
(`register(reads=...)`) and the parameters that name one (`"format": "phase-output"`) — so
the language compares them from the YAML alone, before anything is built.

Pure Python: `dslrun validate` runs this.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsl.language import registry
from dsl.language.diagnostics import Diagnostic, SourceMap, format_path
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import RegistryError
from dsl.language.suggest import closest

# The sections whose component may add outputs, in the order they are built.
_PRODUCERS = ("inputter", "augmenter", "network", "modeler")


@dataclass(frozen=True)
class Read:
    """One output name a section takes from a phase, and where it is written."""

    path: JsonPath  # the parameter holding the name, or the reader's `type` for a fixed read
    name: str  # `<phase>/<output>`, e.g. "val/accuracy"
    reader: str  # how messages name the reader, e.g. "checkpoint.save_best.monitor"
    written: bool  # the user wrote the name (a parameter), rather than the component fixing it

    @property
    def phase(self) -> str:
        return self.name.partition("/")[0]

    @property
    def output(self) -> str:
        return self.name.partition("/")[2]


def produced(pipeline: dict[str, Any]) -> dict[str, list[str]] | None:
    """Every output of each phase of the resolved pipeline, in declaration order.

    None when the modeler does not declare its outputs (a plugin's): then nothing can be said.
    """
    modeler = _component("modeler", pipeline.get("modeler"))
    if modeler is None or modeler.outputs is None:
        return None
    found: dict[str, list[str]] = {}
    sections = [pipeline.get(name) for name in _PRODUCERS] + list(pipeline.get("callbacks") or [])
    kinds = [*_PRODUCERS, *["callback"] * len(pipeline.get("callbacks") or [])]
    for kind, section in zip(kinds, sections):
        component = _component(kind, section)
        if component is None or component.outputs is None or not isinstance(section, dict):
            continue
        for phase, names in _declared(component.outputs, section, pipeline).items():
            found.setdefault(phase, [])
            found[phase] += [name for name in names if name not in found[phase]]
    return found


def _declared(outputs: Any, section: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, list[str]]:
    """`outputs(section)`, or `outputs(section, pipeline)` for a component whose outputs depend
    on another section (a segmentation modeler's `iou_<k>` on the inputter's num_classes)."""
    import inspect

    try:
        takes_pipeline = len(inspect.signature(outputs).parameters) >= 2
    except (TypeError, ValueError):
        takes_pipeline = False
    return outputs(section, pipeline) if takes_pipeline else outputs(section)  # type: ignore[no-any-return]


def reads(pipeline: dict[str, Any]) -> list[Read]:
    """Every output name a section of the resolved pipeline reads."""
    found: list[Read] = []
    sections: list[tuple[JsonPath, str, Any]] = [((name,), name, pipeline.get(name)) for name in _PRODUCERS]
    sections += [(("callbacks", index), "callback", cb) for index, cb in enumerate(pipeline.get("callbacks") or [])]
    for path, kind, section in sections:
        component = _component(kind, section)
        if component is None:
            continue
        found += [Read(path + ("type",), name, component.type, False) for name in component.reads]
        for where, name in _output_params(component.params, section, ()):
            reader = ".".join([component.type, *map(str, where)])
            found.append(Read(path + where, name, reader, True))
    return found


def _output_params(properties: dict[str, Any], values: Any, where: JsonPath) -> Iterator[tuple[JsonPath, str]]:
    """(path below the section, value) of every parameter of format `phase-output` that is set."""
    if not isinstance(values, dict):
        return
    for name, schema in properties.items():
        value = values.get(name)
        if not isinstance(schema, dict) or value is None:
            continue
        if schema.get("format") == registry.PHASE_OUTPUT_FORMAT and isinstance(value, str):
            yield where + (name,), value
        elif isinstance(schema.get("properties"), dict):
            yield from _output_params(schema["properties"], value, where + (name,))


def check_phase_outputs(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every output a section reads is produced by a phase the workflow runs."""
    outputs = produced(pipeline)
    if outputs is None:
        return []
    workflow = [phase[0] for phase in pipeline.get("runner", {}).get("workflow") or []]
    found = []
    for read in reads(pipeline):
        problem, severity = _problem(read, outputs, workflow, sources)
        if problem:
            found.append(sources.diagnostic(read.path, problem, severity))
    return found


def _problem(read: Read, outputs: dict[str, list[str]], workflow: list[str], sources: SourceMap) -> tuple[str, str]:
    """(what is wrong with `read`, severity), or ("", "") when nothing is."""
    if read.phase not in workflow:
        where = sources.locate(("runner", "workflow"))
        written = "the default" if ("runner", "workflow") not in sources else f"{where.file}:{where.line}"
        if read.written:
            return (
                f"{read.name} is never produced: runner.workflow ({written}) has no {read.phase} phase; "
                f"add [{read.phase}, 1] to runner.workflow or watch an output of another phase",
                "error",
            )
        return (
            f"{read.reader} reads {read.name}, but runner.workflow ({written}) has no {read.phase} phase, "
            f"so it never runs; add [{read.phase}, 1] to runner.workflow or remove it",
            "warning",
        )
    if read.output in outputs.get(read.phase, []):
        return "", ""
    available = sorted(f"{read.phase}/{name}" for name in outputs.get(read.phase, []))
    suggestion = _by_class_index(read.output, read.phase, outputs.get(read.phase, [])) or closest(read.name, available)
    hint = f"; did you mean {suggestion!r}?" if suggestion else ";"
    subject = "" if read.written else f"{read.reader} reads {read.name}, but "
    return (
        f"{subject}the {read.phase} phase has no output {read.output!r}{hint} available: {', '.join(available) or 'none'}",
        "error",
    )


def _component(kind: str, section: Any) -> registry.Component | None:
    if not isinstance(section, dict) or not isinstance(section.get("type"), str):
        return None
    try:
        return registry.lookup(kind, section["type"])
    except RegistryError:
        return None


def check_output_name(pipeline: dict[str, Any], name: str, path: JsonPath, sources: SourceMap) -> Diagnostic | None:
    """The problem of a phase output named outside the components (a sweep's metric), as a monitor's is checked."""
    outputs = produced(pipeline)
    if outputs is None:
        return None
    workflow = [phase[0] for phase in pipeline.get("runner", {}).get("workflow") or []]
    problem, severity = _problem(Read(path, name, format_path(path), True), outputs, workflow, sources)
    return sources.diagnostic(path, problem, severity) if problem else None


def _by_class_index(output: str, phase: str, declared: list[str]) -> str | None:
    """`val/ap_three` for `ap_3` when the per-class outputs are named after the classes (declared in
    class order): a trial was offered `val/map` for its `val/ap_8`."""
    match = re.fullmatch(r"(\w+?)_(\d+)", output)
    if match is None:
        return None
    per_class = [name for name in declared if name.startswith(f"{match.group(1)}_")]
    index = int(match.group(2))
    return f"{phase}/{per_class[index]}" if index < len(per_class) else None
