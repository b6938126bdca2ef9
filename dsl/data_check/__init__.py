"""`dslrun validate --data`: what a pipeline's data really holds, checked before any training.

`dslrun validate` checks the YAML; a missing image, a truncated PNG or a label out of range
used to surface minutes into a run, and an empty class or val images copied from train
never did. With `--data` every split the inputter declares is listed as the inputter lists
it (its registered `examples`, see `dsl.data_check.examples`), every image is inspected
(`dsl.data_check.images`: the `skip_corrupt` checks, then Pillow's header and structure
check, no decoding) and the split is summed up (`dsl.data_check.report`): class counts,
sizes, channels, steps per epoch at the configured batch size and world size. Problems are
located like every other validate error: the CSV file and line of a bad row, the image of
an image folder, the YAML value of a setting. No TensorFlow.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from dsl.data_check.examples import Example, Problem, Split
from dsl.data_check.inspection import SAMPLED, inspect, inspected
from dsl.data_check.report import SplitReport, split_warnings, steps
from dsl.data_check.sample import Reservoir
from dsl.data_check.scaling import ScalingReport, scaling_at, scaling_report
from dsl.data_check.text import text_facts
from dsl.inputters import MODES, declared_modes
from dsl.language import registry
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import DslError
from dsl.language.schedule_length import check_schedule_length

# A text split with more than this share cut at sequence_length gets a warning.
TRUNCATED = 0.1
# Problems reported one by one per split; past this, one line counts the rest.
MAX_REPORTED = 20

_KEY_PREFIX = re.compile(r"^inputter\.(?P<key>[a-z_]+): ")


def check_data(
    resolved: dict[str, Any], sources: SourceMap, world_size: int = 1, known: Iterable[str] = (),
    sample: int | None = None,
) -> tuple[list[Diagnostic], list[SplitReport], ScalingReport | None]:
    """Every problem of the data (located), one report per split the inputter declares, and
    what `world_size` processes make of the batch and the learning rate (dsl.data_check.scaling).

    `known` are the paths plain validate already reported, so that a schedule problem seen
    in epochs is not reported again in steps. With `sample`, every example is listed but only
    that many images of each split, drawn at random, are inspected (dsl.data_check.sample).
    """
    _require_pillow()
    inputter = resolved["inputter"]
    component = registry.lookup("inputter", inputter["type"])
    if component.examples is None:
        path: JsonPath = ("inputter", "type")
        message = f"validate --data cannot read the data of inputter type {component.type} (it declares no examples)"
        return [_at_yaml(sources, path, message, "warning")], [], None
    scaling, diagnostics = scaling_at(resolved, world_size, sources)
    replicas, batch = (scaling.replicas, scaling.batch_size) if scaling else (world_size, None)
    reports: list[SplitReport] = []
    for mode in (m for m in MODES if m in declared_modes(inputter)):
        report = SplitReport(f"inputter.{mode}", mode)
        split = component.examples(inputter, mode)
        diagnostics += _check_split(split, report, inputter, sources, sample)
        report.details = split.details(resolved) if split.details is not None else []
        if split.warnings is not None:
            diagnostics += [_at_yaml(sources, path, message, "warning") for path, message in split.warnings(resolved)]
        report.steps = steps(report, inputter, replicas, batch)
        reports.append(report)
    train = next((r for r in reports if r.mode == "train"), None)
    for report in reports:
        report.text = text_facts(report.lengths, report.words, inputter, train.words if train else None,
                                 report is train)
        if report.text.get("truncated", 0.0) > TRUNCATED:
            diagnostics.append(_at_yaml(sources, ("inputter", "sequence_length"), (
                f"{report.text['truncated']:.0%} of the {report.mode} texts are longer than sequence_length "
                f"{inputter['sequence_length']} tokens and are cut (95% have at most {report.text['tokens']['p95']}); "
                "raise inputter.sequence_length or accept losing their ends"), "warning"))
    for report in reports:
        diagnostics += [_at_yaml(sources, ("inputter", report.mode), text, severity)
                        for text, severity in split_warnings(report, train, _num_classes(inputter, report))]
    scaled: ScalingReport | None = None
    if train is not None:
        diagnostics += _length_problems(resolved, sources, train, replicas, batch, set(known))
        if scaling is not None and train.steps:
            scaled, found = scaling_report(resolved, sources, world_size, scaling, train.steps,
                                           steps(train, inputter, 1))
            diagnostics += found
    # One problem two splits meet (image_folder's val reads its classes from the train folders) once.
    unique = list({d.format_text(): d for d in diagnostics}.values())
    return unique, reports, scaled


def _check_split(split: Split, report: SplitReport, inputter: dict[str, Any], sources: SourceMap,
                 sample: int | None = None) -> list[Diagnostic]:
    report.source, report.class_names, report.generated = split.source, split.class_names, split.count
    report.one_class_each, report.waits_for = split.one_class_each, split.waits_for
    found: list[Diagnostic] = []
    extra = 0

    def add(diagnostic: Diagnostic) -> None:
        nonlocal extra
        if len(found) < MAX_REPORTED:
            found.append(diagnostic)
        else:
            extra += 1

    # Only an inputter that reads its files while training can leave an unusable one out (detection's do not).
    can_skip = "skip_corrupt" in registry.lookup("inputter", str(inputter.get("type"))).params

    def unusable(item: Example, why: str) -> None:
        report.unusable += 1
        if inputter.get("skip_corrupt"):
            add(Diagnostic.at(item.where, report.key, f"{why}; skip_corrupt leaves it out", "warning"))
        else:
            hint = " (or set inputter.skip_corrupt: true)" if can_skip else ""
            add(Diagnostic.at(item.where, report.key, f"{why}; fix or remove it{hint}"))

    reservoir = Reservoir(sample) if sample is not None else None
    # A problem repeated word for word (98 rows of a label the classes lack: trial A11) is shown at its
    # first place, with how many more there are.
    first: dict[str, Diagnostic | None] = {}  # a message's diagnostic (None when past MAX_REPORTED)
    repeats: Counter[str] = Counter()
    for item, facts in inspected(split.items, reservoir):
        if isinstance(item, Problem):
            if item.message in first:
                repeats[item.message] += 1
            else:
                diagnostic = _located(item, report.mode, sources)
                add(diagnostic)
                first[item.message] = diagnostic if any(shown is diagnostic for shown in found) else None
        elif facts is SAMPLED:
            report.count(item, None)
        elif isinstance(facts, str):
            unusable(item, facts)
        else:
            report.count(item, facts)
    if reservoir is not None:
        report.inspected, report.listed = len(reservoir.items), reservoir.seen
        for item in reservoir.items:
            facts = inspect(item)
            if isinstance(facts, str):
                report.uncount(item)
                unusable(item, facts)
            elif facts is not None:
                report.count_facts(facts, item.origin)
    for message, more in repeats.items():
        shown = first[message]
        if shown is not None:
            shown.message += f" ({more} more like it in this split)"
    if extra:
        found.append(_at_yaml(sources, ("inputter", report.mode),
                              f"{extra} more problems in this split (the first {MAX_REPORTED} are shown)", "error"))
    return found


def _located(problem: Problem, mode: str, sources: SourceMap) -> Diagnostic:
    """A listing problem where it was found, or at the YAML key its message names (else inputter.<mode>)."""
    key: JsonPath = ("inputter", mode)
    message = problem.message
    match = _KEY_PREFIX.match(message)
    if match:
        key, message = ("inputter", match.group("key")), message[match.end():]
    if problem.where is not None:
        return Diagnostic.at(problem.where, f"inputter.{mode}", message, problem.severity)
    return _at_yaml(sources, key, message, problem.severity)


def _at_yaml(sources: SourceMap, path: JsonPath, message: str, severity: str) -> Diagnostic:
    return sources.diagnostic(path, message, severity)


def _num_classes(inputter: dict[str, Any], report: SplitReport) -> int | None:
    if isinstance(inputter.get("num_classes"), int):
        return int(inputter["num_classes"])
    return len(report.class_names) if report.class_names else None


def _length_problems(
    resolved: dict[str, Any], sources: SourceMap, train: SplitReport, world_size: int, batch: int | None, known: set[str]
) -> list[Diagnostic]:
    """No full batch per epoch (the run would refuse to start), or a schedule that does not fit the run in steps."""
    inputter = resolved["inputter"]
    if train.steps == 0 and train.examples:
        path: JsonPath = ("inputter", "batch_size")
        return [_at_yaml(sources, path, (
            f"batch {batch or inputter['batch_size']} x {world_size} process(es) is larger than the train data "
            f"({train.examples} examples): not one full batch per epoch; lower inputter.batch_size or set "
            "inputter.drop_remainder: false"), "error")]
    if not train.steps:
        return []
    return _dropped_share(inputter, sources, train, world_size, batch) + [
        d for d in check_schedule_length(resolved, sources, train.steps) if d.path not in known]


def _dropped_share(inputter: dict[str, Any], sources: SourceMap, train: SplitReport, world_size: int,
                   batch: int | None) -> list[Diagnostic]:
    """A warning when drop_remainder leaves out more than a tenth of the train examples each epoch:
    60 few-shot images at batch 32 trained on 32 an epoch, and validate said only "1 step" (trial B10)."""
    per_replica = batch or inputter["batch_size"]
    count = train.generated if train.generated is not None else train.examples
    if not inputter.get("drop_remainder", True) or inputter.get("batch_tokens") or not count:
        return []
    used = (train.steps or 0) * per_replica * world_size
    if used > count or (count - used) * 10 <= count:
        return []
    path: JsonPath = ("inputter", "batch_size")
    return [_at_yaml(sources, path, (
        f"batch {per_replica} x {world_size} process(es) trains on {used} of the {count} train examples an epoch: "
        f"inputter.drop_remainder leaves out the last {count - used}, which are not a full batch (other ones each "
        "epoch, as the data is shuffled); lower inputter.batch_size, or set inputter.drop_remainder: false"), "warning")]


def _require_pillow() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise DslError("validate --data reads image headers with Pillow; pip install 'dslrun[train]' or pillow") from None
