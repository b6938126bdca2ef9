"""Resolved pipeline (typed: dsl.language.resolved) → the objects the loop drives. TensorFlow starts here.

Sections are built in dependency order: the inputter first (it knows what the data is and
how much of it there is: `Inputter.facts()`), then everything that needs those facts.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Augmenter, Inputter, Model, Modeler
from dsl.engine.hooks import Callback, sort_callbacks
from dsl.language.context import BuildContext, Placement
from dsl.language.registry import lookup
from dsl.language.resolved import Component, Pipeline


@dataclass
class CompiledPipeline:
    """Every section built, plus the shared context they were built with."""

    pipeline: Pipeline
    context: BuildContext
    inputter: Inputter
    augmenter: Augmenter
    model: Model
    modeler: Modeler
    callbacks: list[Callback]
    max_to_keep: int  # checkpoints the run directory keeps (the checkpoint callback's setting)


def tensorflow_seed(seed: int) -> int:
    """The global seed TensorFlow (and Python's and NumPy's generators) get for the pipeline's
    `seed`: the same number, except one that TensorFlow reads as 0 (it takes seeds modulo
    2**31 - 1), which becomes 2**31 - 2.

    With a global seed of 0, `tf.data` cannot take a seed that is a tensor (it compares the
    pair of seeds with (0, 0) in Python), and the train data hand each epoch its seed as a
    tensor (DataFeed.train). The data's own seeds still come from the pipeline's `seed`.
    """
    return seed if seed % (2**31 - 1) else 2**31 - 2


def configure_tensorflow(pipeline: Pipeline) -> int:
    """Threads, precision, determinism and seeds — before any op exists. Returns the seed used.

    A pipeline without a seed gets a random one, so that data order and augmentation are
    still derived from one number (logged, and usable to reproduce the run).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    runner = pipeline.runner
    if runner.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(runner.intra_op_threads)
    if runner.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(runner.inter_op_threads)
    # Process-wide in Keras: set it every time, so a float32 pipeline after a bf16 one is float32.
    tf.keras.mixed_precision.set_global_policy(runner.precision)
    seed = pipeline.seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**31 - 1)
    tf.keras.utils.set_random_seed(tensorflow_seed(seed))
    if pipeline.deterministic:
        tf.config.experimental.enable_op_determinism()
        # Dropout then draws from a tf.random.Generator whose state the runner checkpoints
        # (Keras' default stateful ops keep a hidden counter a restart resets): exact resume.
        tf.keras.backend.experimental.enable_tf_random_generator()
    return int(seed)


def use_jit(setting: Any) -> bool:
    """`runner.jit_compile`: auto = XLA only where there is a GPU (much slower on CPUs, docs/benchmarks.md)."""
    if setting == "auto":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    return bool(setting)


def build_section(kind: str, component: Component, context: BuildContext) -> Any:
    """Build one component through the registry, from its own parameters."""
    return lookup(kind, component.type).builder(component.arguments(), context)


def compile_pipeline(pipeline: Pipeline, placement: Placement, seed: int, scope: Any = None,
                     prepare_model: Callable[[Any], Any] | None = None, fresh_start: bool = False,
                     batch_size: int | None = None) -> CompiledPipeline:
    """Build inputter, augmenter, network, modeler and callbacks for this process.

    `scope` (the backend's) is entered while the network and modeler create variables;
    `prepare_model` (the backend's) may replace the network's layers before anything uses it;
    `fresh_start` (`--no-resume`) tells the components not to read back what a former run left;
    `batch_size` is this replica's batch (dsl.distributed.scaling; None: `inputter.batch_size`).
    """
    import contextlib

    context = BuildContext(
        pipeline=pipeline,
        model_dir=Path(pipeline.runner.model_dir),
        placement=placement,
        seed=seed,
        fresh_start=fresh_start,
    )
    inputter = build_section("inputter", pipeline.inputter, context)
    context.learn(inputter.facts())
    context.steps_per_epoch = inputter.steps_per_epoch(batch_size, placement.world_size)
    augmenter = build_section("augmenter", pipeline.augmenter, context)
    context.learn(section_facts(pipeline))
    with scope if scope is not None else contextlib.nullcontext():
        model = build_section("network", pipeline.network, context)
        if prepare_model is not None:
            model = prepare_model(model)
        modeler = build_section("modeler", pipeline.modeler, context)
    callbacks = sort_callbacks([build_section("callback", callback, context) for callback in pipeline.callbacks])
    return CompiledPipeline(pipeline, context, inputter, augmenter, model, modeler, callbacks, max_to_keep(pipeline))


def section_facts(pipeline: Pipeline) -> dict[str, Any]:
    """What the augmenter, the network and the modeler tell each other from their parameters,
    learnt before any of them is built (a translation modeler's decoding settings, which the
    network's in-graph search runs with, reach the network this way)."""
    return {**component_facts("augmenter", pipeline.augmenter), **component_facts("network", pipeline.network),
            **component_facts("modeler", pipeline.modeler)}


def component_facts(kind: str, component: Component) -> dict[str, Any]:
    """What a component tells the sections built after it, from its parameters (a detector's
    anchors, which the modeler encodes its targets on; a segmentation augmenter's crop, which the
    network must accept): its registered `facts`."""
    declared = lookup(kind, component.type).facts
    return declared(component.arguments()) if declared is not None else {}


def max_to_keep(pipeline: Pipeline) -> int:
    """How many training checkpoints the run keeps: the first checkpoint callback's
    `max_to_keep` (5 without one), handed to the runner's checkpointing explicitly."""
    for callback in pipeline.callbacks_of("checkpoint"):
        return int(callback.params.get("max_to_keep", 5))
    return 5
