"""`dslrun validate --build`: build the network on the declared shapes and trace one train and one
val step on zero-filled batches — what no rule list covers (a shape or dtype mismatch between
the network, the augmenter and the modeler), found in seconds instead of after the data is read.

Nothing is read and nothing is written: the data's facts are those the YAML declares
(`dsl.language.rules.declare`: image shape, classes, sequence length, max_tokens as the vocabulary), the
batch is zeros of the shapes the inputter's `batch` words give, and no run directory is made.
Each stage runs on its own, so an error is laid at the section that caused it: the augmenter
on one example, the network on the augmented batch, the modeler's loss on its outputs, then a
whole train step (optimizer included) and a val step.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.engine.compiler import build_section, section_facts
from dsl.engine.steps import make_train_call, make_val_call
from dsl.language.checks import used_components
from dsl.language.context import BuildContext
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import DslError, RegistryError
from dsl.language.facts import PartSpec
from dsl.language.registry import lookup
from dsl.language.resolved import Pipeline
from dsl.language.rules import Declared, declare, example_spec

# A batch size small enough to be quick, large enough that batch statistics are defined.
BATCH = 2
_SETTING = re.compile(r"^(?P<path>[a-z_]+(?:\.[A-Za-z_0-9]+)*): (?P<message>.+)$", re.DOTALL)


class _Failed(Exception):
    """A stage failed; `diagnostic` says where and why."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def check_build(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Build and trace `pipeline` on zeros; every problem as a located diagnostic (at most one)."""
    return build_and_check(pipeline, sources)[1]


def build_and_check(pipeline: dict[str, Any], sources: SourceMap) -> tuple[Any, list[Diagnostic]]:
    """`check_build`, and the network it built (None when it could not): `validate --link` counts
    its gradients."""
    inputter = lookup("inputter", pipeline["inputter"]["type"])
    declared = declare(pipeline, inputter.facts)
    if inputter.batch is None:
        return None, [sources.diagnostic(
            ("inputter", "type"),
            f"inputter {inputter.type!r} does not declare its batch, so --build cannot make one; "
            "validate without --build", "warning")]
    tf.get_logger().setLevel("ERROR")  # retracing notes: each pipeline is traced once, on purpose
    tf.keras.backend.clear_session()
    typed = Pipeline.from_resolved(pipeline)
    tf.keras.mixed_precision.set_global_policy(typed.runner.precision)
    tf.keras.utils.set_random_seed(int(typed.seed or 0))
    try:
        model = _trace(typed, sources, declared, inputter.batch)
        return model, _built_checks(pipeline, sources, model)
    except _Failed as failed:
        return None, [failed.diagnostic]
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def _built_checks(pipeline: dict[str, Any], sources: SourceMap, model: Any) -> list[Diagnostic]:
    """What each used type can tell only with the built network (`register(build_checks=...)`),
    once per type: an init_checkpoint's file matched with it by name, as the run will."""
    return [found for component in used_components(pipeline) for check in component.build_checks
            for found in check(pipeline, sources, model)]


def _trace(pipeline: Pipeline, sources: SourceMap, declared: Declared, batch: tuple[str, str]) -> Any:
    """Build every section on the declared facts and trace a train and a val step; the built network."""
    context = BuildContext(pipeline=pipeline, model_dir=Path("/nonexistent/validate-build"), seed=0)
    context.learn({**declared.facts(), **section_facts(pipeline)})
    features, targets = _zero_example(batch, declared, sources)
    augmenter = _stage("augmenter", sources, lambda: build_section(
        "augmenter", pipeline.augmenter, context))
    seed = tf.constant([1, 2], tf.int64)
    train_batch = _stage("augmenter", sources, lambda: _batched(
        (features, targets), lambda f, t: augmenter.train(f, t, seed=seed)))
    val_batch = _stage("augmenter", sources, lambda: _batched((features, targets), lambda f, t: (augmenter.eval(f), t)))
    model = _stage("network", sources, lambda: build_section("network", pipeline.network, context))
    outputs = _stage("network", sources, lambda: model(train_batch[0], training=True))
    modeler = _stage("modeler", sources, lambda: build_section("modeler", pipeline.modeler, context))
    try:
        modeler.loss(train_batch[1], outputs, model)
    except (ValueError, TypeError, tf.errors.OpError) as exc:
        shape = tuple(outputs.shape) if hasattr(outputs, "shape") else type(outputs).__name__
        path = ("network", "type")
        raise _Failed(sources.diagnostic(path, (
            f"the network's outputs, of shape {shape} for a batch of {BATCH}, do not fit modeler "
            f"{pipeline.modeler.type!r} ({_where(sources, ('modeler', 'type'))}): {_one_line(exc)}"))) from None
    optimizer = _stage("modeler", sources, lambda: modeler.optimizer(100))
    traces: Counter[str] = Counter()
    train = make_train_call(model, modeler, optimizer, _metrics(modeler, "train"), lambda tape: tape, False, traces,
                            steps_per_call=1)
    _stage("modeler", sources, lambda: train(_repeat(train_batch), tf.constant(1)))
    val = make_val_call(model, modeler, _metrics(modeler, "val"), traces)
    _stage("modeler", sources, lambda: val(_repeat(val_batch), tf.constant(1)))
    return model


def _metrics(modeler: Any, mode: str) -> dict[str, Any]:
    """The phase's metrics as the runner makes them: the loss's mean, then the modeler's."""
    return {"loss": tf.keras.metrics.Mean(name=f"{mode}_loss"), **modeler.metrics(mode)}


def _zero_example(batch: tuple[str, str], declared: Declared, sources: SourceMap) -> tuple[Any, Any]:
    """One example of zeros, shaped as the inputter's batch words and the declared facts say."""
    spec = example_spec(batch, declared)
    if spec is None:
        raise _Failed(sources.diagnostic(
            ("inputter", "type"),
            f"--build cannot make a batch of {' and '.join(batch)}; validate without --build",
            "warning"))
    features, targets = (_zeros(part) for part in spec)
    return features, targets


def _zeros(part: PartSpec) -> Any:
    """Zeros of one (shape, dtype), or a dict of them (a detection target's boxes, classes, count)."""
    if isinstance(part, dict):
        return {name: _zeros(spec) for name, spec in part.items()}
    shape, dtype = part
    return tf.zeros(shape, dtype)


def _batched(example: tuple[Any, Any], transform: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """A batch of `example` transformed as the inputter's `map` would (in a graph)."""
    dataset = tf.data.Dataset.from_tensors(example).repeat(BATCH).map(transform).batch(BATCH)
    return next(iter(dataset))  # type: ignore[no-any-return]


def _repeat(batch: tuple[Any, Any]) -> Any:
    return iter(tf.data.Dataset.from_tensors(batch).repeat())


def _stage(section: str, sources: SourceMap, run: Callable[[], Any]) -> Any:
    """`run()`; its error (the user's DslError or TensorFlow's) as one line at `section`."""
    try:
        return run()
    except (DslError, RegistryError) as exc:
        raise _Failed(_located(section, str(exc), sources, own=True)) from None
    except (ValueError, TypeError, tf.errors.OpError) as exc:
        raise _Failed(_located(section, _one_line(exc), sources, own=False)) from None


def _located(section: str, message: str, sources: SourceMap, own: bool) -> Diagnostic:
    """At the setting a component's message names (`network.depth: ...`), else at the section's type."""
    found = _SETTING.match(message) if own else None
    if found:
        path: JsonPath = tuple(int(p) if p.isdigit() else p for p in found.group("path").split("."))
        return sources.diagnostic(path, found.group("message"))
    path = (section, "type")
    kind = {"augmenter": "augmenter", "network": "network", "modeler": "modeler"}[section]
    return sources.diagnostic(
        path,
        f"{kind} does not build or trace on the declared shapes (--build, zero-filled batch): {message}")


def _where(sources: SourceMap, path: JsonPath) -> str:
    where = sources.locate(path)
    return f"{where.file}:{where.line}"


def _one_line(exc: BaseException) -> str:
    from dsl.language.errors import clean_error

    text = exc.message if isinstance(exc, tf.errors.OpError) else str(exc)
    line = clean_error(text or type(exc).__name__)
    return line if len(line) <= 400 else line[:397] + "..."
