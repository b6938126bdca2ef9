"""`dslrun validate` on `init_checkpoint`: the path, the patterns and, with TensorFlow, the names.

Without TensorFlow (plain `validate`, which never imports it):
- `path` names a readable checkpoint: a run directory (or its checkpoints/ or best/) with a
  `checkpoint` file naming a prefix whose `.index` is there, a prefix with its `.index`, or
  an `.h5` file. A path that does not exist is a warning, not an error: a fine-tuning
  pipeline is written (and validated in CI) before the base run that writes its checkpoint;
  `dslrun run` stops with an error if it is still missing then.
- every `skip` / `trainable` entry is `head`, `backbone` or a valid regular expression;
- `unfreeze_after_epochs` has something to unfreeze (`trainable` is set) and comes before the
  run's end (below `runner.max_epochs`), and
  `backbone_lr_multiplier` is used with an optimizer it works with (not an adaptive one).

With TensorFlow already imported (`validate --build`), the checkpoint is opened and the
variable names and shapes it holds are read (`checkpoint_names`: its index and object
graph, no values): a file TensorFlow cannot read is an error. With a built model,
`restore_diagnostics` matches it by name as the run will (nothing assigned).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from dsl.engine.checkpoint_paths import named_prefix
from dsl.engine.rundir import DONE_MARKER
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.suggest import closest, path_did_you_mean

GROUPS = ("head", "backbone")  # dsl.networks._groups.GROUPS, without importing networks
ADAPTIVE = ("adam", "adamw", "rmsprop")  # optimizers that divide a gradient's scale out (dsl.engine.gradient_scale)


def check_init_checkpoint(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Every init_checkpoint callback's path and patterns (see the module's docstring)."""
    found: list[Diagnostic] = []
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if not isinstance(callback, dict) or callback.get("type") != "init_checkpoint":
            continue
        found += _patterns(callback, ("callbacks", index), sources)
        found += _phases(callback, ("callbacks", index), pipeline, sources)
        path = callback.get("path")
        if isinstance(path, str):
            where: JsonPath = ("callbacks", index, "path")
            problem, severity = checkpoint_problem(path)
            if problem is None and "tensorflow" in sys.modules:
                problem, severity = _names_problem(path), "error"
            if problem is not None:
                found.append(sources.diagnostic(where, problem, severity))
            else:
                found += _old_head(callback, pipeline, where, sources) + _other_network(callback, pipeline, where, sources)
    return found


def missing_at_start(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """`dslrun run` starting: a path that does not exist is an error now, before TensorFlow loads
    (a trial waited 14 s for it), unless the run resumes its own checkpoints (then it is not read)."""
    model_dir = (pipeline.get("runner") or {}).get("model_dir")
    if model_dir and (Path(model_dir) / "checkpoints" / "checkpoint").is_file():
        return []
    found = []
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        path = callback.get("path") if isinstance(callback, dict) and callback.get("type") == "init_checkpoint" else None
        if isinstance(path, str) and not Path(path).exists() and not Path(f"{path}.index").exists():
            where: JsonPath = ("callbacks", index, "path")
            found.append(sources.diagnostic(where, (
                f"{path!r} does not exist; train the base pipeline whose runner.model_dir it is first, or fix the "
                f"path (relative paths are relative to the directory dslrun starts in){_nearest(path)}")))
    return found


def _other_network(callback: dict[str, Any], pipeline: dict[str, Any], where: JsonPath, sources: SourceMap) -> list[Diagnostic]:
    """A warning when the checkpoint's run used another network type: its variables will not match by
    name (trial B9: plain validate said nothing; --build listed 105 missing names)."""
    from dsl.engine.checkpoint_paths import run_of

    network = pipeline.get("network") or {}
    ours = network.get("type")
    run = run_of(callback["path"])
    trained = _trained(callback, "network")
    theirs = trained.get("type")
    if not isinstance(theirs, str) or not isinstance(ours, str):
        return []
    if theirs != ours:
        return [sources.diagnostic(where, (
            f"{run} trained a {theirs} network, this pipeline builds a {ours}: their variables will not match by name "
            "(the run stops at its start; `validate --build` checks it); give a checkpoint of the same network"),
            "warning")]
    # The same type with other structure (ResNet-32 from a ResNet-20 run, trial B10): said as "may",
    # since some parameters (dropout, momentum) change no variable; --build knows.
    other = other_settings(network, trained)
    shown_items = [f"{key} {trained[key]} there, {network[key]} here{_written(sources, ('network', key))}" for key in other]
    # The images' shape shapes the first layer's kernel (its channels) and a dense layer on them (trial
    # B17: a grayscale fine-tune of an RGB run passed plain validate without a word).
    ours_shape = (pipeline.get("inputter") or {}).get("image_shape")
    theirs_shape = _trained(callback, "inputter").get("image_shape")
    if isinstance(ours_shape, list) and isinstance(theirs_shape, list) and ours_shape != theirs_shape:
        shown_items.append(f"inputter.image_shape {theirs_shape} there, {ours_shape} here"
                           f"{_written(sources, ('inputter', 'image_shape'))}")
    if not shown_items:
        return []
    shown = ", ".join(shown_items)
    return [sources.diagnostic(where, (
        f"{run} trained its {ours} with other settings ({shown}): its variables may not match this network's "
        "(the run stops at its start if they do not); `validate --build` checks each one"), "warning")]


def _trained(callback: dict[str, Any], section: str) -> dict[str, Any]:
    """`section` of the pipeline the checkpoint's run used (its pipeline.yaml, read once), or {}."""
    from dsl.engine.checkpoint_paths import run_of, trained_section

    run = run_of(callback["path"])
    return (trained_section(run, section) or {}) if run is not None else {}


def other_settings(network: dict[str, Any], trained: dict[str, Any]) -> list[str]:
    """The network parameters set otherwise than in the checkpoint's run that shape its variables."""
    return [key for key in network if key not in UNSTRUCTURAL and key in trained and network[key] != trained[key]]


def _cause(callback: dict[str, Any], pipeline: dict[str, Any]) -> tuple[JsonPath, Any] | None:
    """The network setting a failed restore comes from, and the checkpoint's run's value of it, when
    that run set it otherwise: there the user changed something (trial B16's variant set
    `network: {depth: 32}`, and the error stood at the base file's checkpoint path)."""
    trained = _trained(callback, "network")
    other = other_settings(pipeline.get("network") or {}, trained)
    return (("network", other[0]), trained[other[0]]) if other else None


def _written(sources: SourceMap, key: JsonPath) -> str:
    """` (file:line)` where the pipeline sets `key`, for a message located elsewhere: a variant that
    `extends` the callback's file changed it (trial B13 was sent to the base file's line)."""
    if key not in sources.entries:
        return ""
    at = sources.locate(key)
    return f" ({at.file}:{at.line})"


# Network parameters that change no variable's name or shape (num_classes: the head, reset_head's).
UNSTRUCTURAL = ("type", "num_classes", "dropout", "activation", "weights", "batch_norm_momentum", "batch_norm_epsilon")


def _old_head(callback: dict[str, Any], pipeline: dict[str, Any], where: JsonPath, sources: SourceMap) -> list[Diagnostic]:
    """A warning when the head will be restored (as many classes) from a run that named other
    classes: a trial's digits 5-9 started from the digits 0-4 classifier with only "restored 107
    variables" said. Set reset_head either way and nothing is said."""
    from dsl.engine.checkpoint_paths import run_of, trained_classes
    from dsl.language.rules import declared_classes

    if callback.get("reset_head") is not None or "head" in (callback.get("skip") or []):
        return []
    classes = declared_classes(pipeline.get("inputter") or {})
    if classes is None:
        return []
    run = run_of(callback["path"])
    theirs = trained_classes(run) if run is not None else None
    if run is None or not theirs or len(theirs) != len(classes):
        return []
    shown = ", ".join(theirs[:8]) + (", ..." if len(theirs) > 8 else "")
    if theirs == classes:
        return _same_classes_other_data(run, theirs, pipeline, where, sources)
    return [sources.diagnostic(where, (
        f"{run} was trained on other classes ({shown}), as many as this pipeline's, so its head (classifier) is "
        "restored and training starts from the old task's; set reset_head: true for a new task, or reset_head: false "
        "to keep the old head on purpose"), "warning")]


def _same_classes_other_data(run: Path, classes: list[str], pipeline: dict[str, Any], where: JsonPath,
                             sources: SourceMap) -> list[Diagnostic]:
    """The head restored for the same class names but other train data: a pipeline that `extends`
    the base inherits its `classes`, and labels written as indices take those names whatever they
    mean (trial B11: digits 5-9 labelled 0-4 were trained, predicted and exported as zero..four)."""
    from dsl.engine.checkpoint_paths import trained_section

    def files(value: Any) -> list[str]:
        listed = value if isinstance(value, list) else [value]
        return sorted(os.path.realpath(str(item)) for item in listed if isinstance(item, str))

    ours = files((pipeline.get("inputter") or {}).get("train"))
    before = files((trained_section(run, "inputter") or {}).get("train"))
    if not ours or not before or ours == before:
        return []
    inputter = pipeline.get("inputter") or {}
    written = ""
    if isinstance(inputter.get("classes"), list) and ("inputter", "classes") in sources.entries:
        classes_at = sources.locate(("inputter", "classes"))
        written = f" (inputter.classes, {classes_at.file}:{classes_at.line})"
    elif not isinstance(inputter.get("classes"), list):
        written = " (the sub-folder names of its data, as inputter.classes is null)"
    shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
    return [sources.diagnostic(where, (
        f"{run} was trained on other data ({', '.join(before[:2])}) with the classes this pipeline names{written}: "
        f"{shown}; its head (classifier) is restored, so this data's labels keep that run's meaning (label 0 is "
        f"{classes[0]!r}). If they mean other classes, set reset_head: true and inputter.classes to their "
        "names; set reset_head: false to keep the head on purpose"), "warning")]


def _patterns(callback: dict[str, Any], base: JsonPath, sources: SourceMap) -> list[Diagnostic]:
    found = []
    for key in ("skip", "trainable"):
        for position, entry in enumerate(callback.get(key) or []):
            if not isinstance(entry, str) or entry in GROUPS:
                continue
            path = (*base, key, position)
            try:
                re.compile(entry)
            except re.error as exc:
                found.append(sources.diagnostic(
                    path,
                    f"{entry!r} is not a regular expression ({exc}); escape special "
                    f"characters with a backslash, or use head or backbone"))
                continue
            keyword = closest(entry, GROUPS)
            if keyword is not None and keyword != entry and entry.isalpha():
                # `[haed]` passed plain validate as a pattern of variable names (trial B10).
                found.append(sources.diagnostic(path, (
                    f"{entry!r} is read as a pattern of variable names, not as the group {keyword}; did you mean "
                    f"{keyword!r}? (`validate --build` matches each pattern against the network)"), "warning"))
    return found


def _phases(callback: dict[str, Any], base: JsonPath, pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Two-phase settings that cannot work: nothing to unfreeze, a multiplier Adam divides out."""
    found = []
    if callback.get("unfreeze_after_epochs") is not None and callback.get("trainable") is None:
        path = (*base, "unfreeze_after_epochs")
        found.append(sources.diagnostic(
            path,
            "there is nothing to unfreeze: every layer trains from the start without "
            "`trainable`; add trainable: [head] for a first phase with the backbone frozen"))
    trainable = callback.get("trainable")
    if callback.get("reset_head") is True and isinstance(trainable, list) and trainable and set(trainable) <= {"backbone"} \
            and callback.get("unfreeze_after_epochs") is None:
        path = (*base, "trainable")
        found.append(sources.diagnostic(
            path,
            "the head is reset (reset_head: true) but never trains: trainable names the backbone "
            "only; add head (trainable: [head, backbone], or drop trainable)"))
    unfreeze, epochs = callback.get("unfreeze_after_epochs"), (pipeline.get("runner") or {}).get("max_epochs")
    if isinstance(unfreeze, int) and isinstance(epochs, int) and unfreeze >= epochs:
        path = (*base, "unfreeze_after_epochs")
        found.append(sources.diagnostic(
            path,
            f"the layers never unfreeze: {unfreeze} is not below runner.max_epochs {epochs}, so "
            "the run ends first; lower unfreeze_after_epochs or raise runner.max_epochs"))
    if isinstance(unfreeze, int) and callback.get("trainable") is not None:
        found += _inherited_drop(callback, (*base, "unfreeze_after_epochs"), pipeline, sources)
    else:
        found += _inherited_drops(pipeline, sources)
    optimizer = ((pipeline.get("modeler") or {}).get("optimizer") or {}).get("type")
    multiplier = callback.get("backbone_lr_multiplier", 1.0)
    if multiplier != 1.0 and optimizer in ADAPTIVE:
        path = (*base, "backbone_lr_multiplier")
        found.append(sources.diagnostic(
            path,
            f"the multiplier scales the backbone's gradients, which the {optimizer} optimizer "
            f"normalises away; use modeler.optimizer.type momentum (or sgd, nesterov), or "
            f"remove backbone_lr_multiplier"))
    return found


def _inherited_drop(callback: dict[str, Any], at: JsonPath, pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A base file's lr schedule that has lowered the rate when the backbone unfreezes: trial B15's
    second phase trained its backbone at a hundredth of the rate it meant, with nothing said. The
    schedule written in the fine-tuning file itself is taken as meant (a lower rate for the second
    phase is the usual recipe); one inherited from a base file was written for another run."""
    from dsl.modelers.base import factor_at_epoch

    modeler = pipeline.get("modeler") or {}
    schedule, schedule_at = modeler.get("lr_schedule") or {}, ("modeler", "lr_schedule")
    where, top = sources.inherited_from(schedule_at), sources.root
    if where is None:
        return []
    epochs = (pipeline.get("runner") or {}).get("max_epochs")
    factor = factor_at_epoch(schedule, callback["unfreeze_after_epochs"], epochs if isinstance(epochs, int) else None)
    if factor is None or factor >= 1.0:
        return []
    rate = (modeler.get("optimizer") or {}).get("learning_rate")
    multiplier = callback.get("backbone_lr_multiplier", 1.0)
    starts = f"{factor:g} x the rate"
    if isinstance(rate, (int, float)):
        starts += f" ({rate:g} x {factor:g} = {rate * factor:g}"
        starts += f", times backbone_lr_multiplier {multiplier:g}: {rate * factor * multiplier:g})" if multiplier != 1.0 else ")"
    return [sources.diagnostic(at, (
        f"the backbone unfreezes after {callback['unfreeze_after_epochs']} epochs, where modeler.lr_schedule "
        f"({schedule.get('type', 'constant')}, from {where.file}:{where.line}, which {top.file} extends) is down to "
        f"{starts}; give {top.file} its own modeler.lr_schedule for this run if that is not meant"), "warning")]


def _inherited_drops(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A fine-tuning file that sets its own run length under a base file's piecewise boundaries: they
    were chosen for the base's run from scratch. Trial B16's 25-epoch fine-tune ran its last 19 epochs
    at a tenth of the rate it wrote, and nothing said so (the first line now gives the schedule too)."""
    schedule = (pipeline.get("modeler") or {}).get("lr_schedule") or {}
    where = sources.inherited_from(("modeler", "lr_schedule", "boundaries"))
    length: JsonPath = ("runner", "max_epochs")
    epochs = (pipeline.get("runner") or {}).get("max_epochs")
    if where is None or schedule.get("type") != "piecewise" or not isinstance(epochs, int) \
            or length not in sources or sources.inherited_from(length) is not None:
        return []
    values = schedule.get("values") or []
    drops = [(epoch, value) for epoch, value in zip(schedule.get("boundaries") or [], values[1:])
             if epoch < epochs and value < values[0]]
    if not drops:
        return []
    epoch, value = drops[0]
    top = sources.root.file
    return [sources.diagnostic(length, (
        f"this fine-tuning run trains {epochs} epochs under the piecewise modeler.lr_schedule of {where.file}:{where.line}, "
        f"written for that file's run: the rate drops to {value / values[0]:g} x after epoch {epoch:g}, for the last "
        f"{epochs - epoch:g} epochs; give {top} its own modeler.lr_schedule (type: constant keeps the rate) if that "
        "is not meant"), "warning")]


def _nearest(path: str) -> str:
    """`; did you mean ...?` among what could be a checkpoint: a folder (a run, its checkpoints/ or
    best/), a prefix's .index file, a Keras .h5 file (not the pipeline file beside the run)."""
    return path_did_you_mean(path, lambda near: near.is_dir() or near.name.endswith((".index", ".h5")))


def resolve_prefix(path: str) -> str | None:
    """The checkpoint prefix (or .h5 file) `path` designates, as init_checkpoint reads it; None if none."""
    given = Path(path)
    if given.name.endswith(".h5"):
        return path if given.is_file() else None
    if given.is_dir():
        for directory in (given, given / "checkpoints"):
            prefix = _latest(directory)
            if prefix is not None:
                return prefix
        return None
    prefix = named_prefix(path)
    return prefix if Path(f"{prefix}.index").is_file() else None


def _latest(directory: Path) -> str | None:
    """The prefix the directory's `checkpoint` file names (TensorFlow's text format), if present."""
    try:
        text = (directory / "checkpoint").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', text, re.MULTILINE)
    if match is None:
        return None
    prefix = Path(match.group(1))
    return str(prefix if prefix.is_absolute() else directory / prefix)


def checkpoint_problem(path: str) -> tuple[str | None, str]:
    """(what is wrong with `path` as init_checkpoint.path, severity), or (None, "") when it is usable."""
    given = Path(path)
    if not given.exists() and not Path(f"{path}.index").exists():
        held = sorted((index.name.removesuffix(".index") for index in given.parent.glob("ckpt-*.index")),
                      key=lambda name: int(name.split("-")[1]) if name.split("-")[1].isdigit() else 0)
        if held and re.fullmatch(r"ckpt-\d+", given.name):
            # Trial B15's ckpt-999 was "does not exist (yet)" with nothing to pick from. A finished run
            # (its end marker beside checkpoints/) writes no more, so that one is an error.
            run = given.parent.parent if given.parent.name == "checkpoints" else given.parent
            finished = (run / DONE_MARKER).is_file()
            shown = ", ".join(held) if len(held) <= 5 else f"{len(held)} checkpoints, the newest {', '.join(held[-3:])}"
            return (f"{path!r} does not exist{'' if finished else ' (yet)'}: {given.parent} holds {shown}; give one of "
                    f"them, or the run directory {run} for its newest"), "error" if finished else "warning"
        return (f"{path!r} does not exist (yet); the run stops with an error unless a run writes it first: "
                f"train the base pipeline whose runner.model_dir it is, or fix the path{_nearest(path)}"), "warning"
    prefix = resolve_prefix(path)
    if prefix is None:
        return (f"{path!r} is not a checkpoint dslrun can read: give a run directory (or its checkpoints/ or "
                f"best/, which hold a `checkpoint` file), a prefix such as .../ckpt-100 (or its .index file), "
                f"or a Keras .h5 / .weights.h5 file"), "error"
    if not prefix.endswith(".h5") and not Path(f"{prefix}.index").is_file():
        return (f"{path!r}: its `checkpoint` file names {prefix}, whose .index is missing (deleted or "
                f"damaged); give another checkpoint"), "error"
    return None, ""


def _names_problem(path: str) -> str | None:
    """With TensorFlow: the file opened and its variable names read."""
    from dsl.language.errors import DslError

    prefix = resolve_prefix(path)
    if prefix is None or prefix.endswith(".h5"):
        return None  # a .weights.h5 file stores no names: paired with the model when the run loads it
    try:
        names = checkpoint_names(prefix)
    except (DslError, OSError, ValueError) as exc:
        return f"{path!r} cannot be read as a checkpoint: {exc}"
    except Exception as exc:  # TensorFlow's own errors (DataLossError, ...), a damaged file
        return f"{path!r} cannot be read as a checkpoint: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if not names:
        return f"{path!r} holds no model variable"
    return None


def checkpoint_names(prefix: str) -> dict[str, tuple[int, ...]]:
    """The model variables a checkpoint (or .h5 file) holds, by name, with their shapes (TensorFlow)."""
    from dsl.callbacks._pretrained import read_shapes

    return read_shapes(prefix)


def restore_diagnostics(pipeline: dict[str, Any], sources: SourceMap, model: Any) -> list[Diagnostic]:
    """With a built `model` (`validate --build`): each init_checkpoint matched with its file by
    name, as the run will (dsl.callbacks._restore_plan, nothing assigned); what the run would
    refuse, located at the callback's path."""
    from dsl.language.errors import DslError

    found = []
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if not isinstance(callback, dict) or callback.get("type") != "init_checkpoint":
            continue
        if not isinstance(callback.get("path"), str) or checkpoint_problem(callback["path"])[0] is not None:
            continue  # said by check_init_checkpoint
        where: JsonPath = ("callbacks", index, "path")
        try:
            check_restore(model, callback)
        except DslError as exc:
            # A skip pattern that matches nothing is the skip entry's mistake, not the path's (trial B9); a
            # trainable without a fresh head is trainable's, written maybe in a variant that extends the path's file (B13).
            key = next((key for key in ("skip", "trainable") if str(exc).startswith(f"init_checkpoint.{key}")), "path")
            at_key: JsonPath = ("callbacks", index, key) if key in callback else where
            cause = _cause(callback, pipeline) if key == "path" else None
            if cause is not None:  # said where the setting is, with the checkpoint's line
                (setting, theirs), path = cause, sources.locate(where)
                found.append(sources.diagnostic(setting, f"{exc}; the checkpoint's run (init_checkpoint.path at "
                                                         f"{path.file}:{path.line}) had network.{setting[1]} {theirs}"))
            else:
                found.append(sources.diagnostic(at_key, str(exc)))
        problem = trainable_problem(model, callback)
        if problem:
            at: JsonPath = ("callbacks", index, "trainable")
            found.append(sources.diagnostic(at, problem))
    return found


def trainable_problem(model: Any, callback: dict[str, Any]) -> str | None:
    """An init_checkpoint's `trainable` entry that matches none of the built model's variables."""
    if not callback.get("trainable"):
        return None
    from dsl.callbacks._freeze import unmatched_trainable
    from dsl.callbacks._restore_plan import selectors
    from dsl.language.errors import DslError

    try:
        return unmatched_trainable(model, selectors(model, list(callback["trainable"]), "init_checkpoint.trainable"))
    except DslError as exc:  # `head` with a network that declares none
        return str(exc)


def check_restore(model: Any, callback: dict[str, Any]) -> None:
    """Match `model` with an init_checkpoint entry's file by name, as the run will, assigning
    nothing; raises DslError with what the run would refuse."""
    from dsl.callbacks._pretrained import read_stored, resolve
    from dsl.callbacks._restore_plan import plan_restore

    path = resolve(callback["path"])
    plan_restore(model, read_stored(model, path), path, callback, list(callback.get("skip") or []))
