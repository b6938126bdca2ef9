"""The compiled step functions: one optimizer update (`make_step`), k of them per graph call,
and one val pass per call.

`make_step` is the only train step there is. A Horovod or local backend calls it directly
(Horovod reduces the gradients in its tape); a `tf.distribute` backend runs it in every
replica with `strategy.run` (its optimizer sums the replicas' gradients, hence the loss
divided by the number of replicas). `make_train_call` wraps either in the k-step loop.

A batch is `(features, targets)`, whatever structure the inputter and the modeler agreed
on (an image and a class, an image and a mask, token ids and a class): the calls pass both
to the network and the modeler without looking inside.

Both calls take a `tf.data` iterator and a step count as tensors, so a new epoch's iterator
or a shorter last call reuses the same graph instead of retracing (`traces` counts
tracings; a test fails when a second epoch retraces).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import tensorflow as tf

from dsl.engine.contracts import StepCall
from dsl.engine.direct_call import DirectCall
from dsl.engine.global_batch import Replicas, sharing
from dsl.engine.gradient_scale import scale_gradients
from dsl.engine.precision import scaled_loss, unscaled_gradients

Step = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _identity_tape(tape: tf.GradientTape) -> tf.GradientTape:
    return tape


def make_step(
    model: tf.keras.Model,
    modeler: Any,
    optimizer: tf.keras.optimizers.Optimizer,
    metrics: dict[str, tf.keras.metrics.Metric],
    wrap_tape: Callable[[tf.GradientTape], Any] = _identity_tape,
    num_replicas: int = 1,
    jit_gradients: bool = False,
    replicas: Replicas | None = None,
) -> Step:
    """`step(features, targets)`: one optimizer update from this replica's batch; returns its loss.

    `num_replicas` > 1 is for a step run in a `tf.distribute` replica context: Keras sums the
    replicas' gradients in `apply_gradients`, so each replica differentiates loss / replicas
    and the update is the mean over the global batch (Horovod's tape averages instead, and
    leaves it at 1). The loss returned and the `loss` metric are the replica's own, unscaled.

    `jit_gradients` XLA-compiles the forward and backward pass only: under a strategy,
    `apply_gradients` holds the all-reduce, which XLA on CPU cannot compile (the process
    aborted when it tried).

    `replicas` (a synchronous backend's, more than one) lets a loss normalised by a count over
    its batch divide by the global batch's count (dsl.engine.global_batch); never with XLA.
    """
    loss_metric = metrics["loss"]
    terms = loss_term_metrics(modeler, metrics)
    others = [metric for name, metric in metrics.items() if name != "loss" and name not in terms]

    def gradients_of(features: Any, targets: Any) -> tuple[tf.Tensor, Any, list[tf.Tensor], dict[str, tf.Tensor]]:
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            with sharing(replicas):
                losses = modeler.loss(targets, outputs, model)
            loss = losses["loss"]
            share = loss / num_replicas if num_replicas > 1 else loss
            objective = scaled_loss(optimizer, share)
        tape = wrap_tape(tape)
        gradients = unscaled_gradients(optimizer, tape.gradient(objective, model.trainable_variables))
        gradients = scale_gradients(model, model.trainable_variables, gradients)  # per-group learning rates
        return loss, outputs, gradients, {name: losses[name] for name in terms}

    if jit_gradients:
        gradients_of = tf.function(gradients_of, jit_compile=True)

    def step(features: Any, targets: Any) -> tf.Tensor:
        loss, outputs, gradients, values = gradients_of(features, targets)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        for metric in others:
            metric.update_state(targets, outputs)
        for name, metric in terms.items():
            metric.update_state(values[name])
        loss_metric.update_state(loss)
        return tf.cast(loss, tf.float32)

    return step


def loss_term_metrics(modeler: Any, metrics: dict[str, tf.keras.metrics.Metric]) -> dict[str, tf.keras.metrics.Metric]:
    """The metrics that average parts of the modeler's loss (`cross_entropy`, `l2_loss`: the
    modeler's `loss_terms()`), updated with that part of `modeler.loss(...)` rather than with
    (targets, outputs). The data loss and the regulariser are reported apart this way."""
    names: list[str] = getattr(modeler, "loss_terms", lambda: [])()
    return {name: metrics[name] for name in names if name in metrics}


def make_train_call(
    model: tf.keras.Model,
    modeler: Any,
    optimizer: tf.keras.optimizers.Optimizer,
    metrics: dict[str, tf.keras.metrics.Metric],
    wrap_tape: Callable[[tf.GradientTape], Any],
    jit_compile: bool,
    traces: Counter[str],
    strategy: tf.distribute.Strategy | None = None,
    replicas: Replicas | None = None,
    steps_per_call: int = 0,
) -> StepCall:
    """A compiled `call(iterator, num_steps)` running `num_steps` optimizer steps: a
    `tf.function` called through its concrete function (dsl.engine.direct_call).

    `steps_per_call` 1 (`runner.steps_per_call`, the default) builds the call without the graph
    loop: it then always runs one step, and the runner always asks for one. A `tf.range` loop of
    one iteration costs a visible share of a small model's step (bench/call_overhead.py,
    docs/benchmarks.md); 0 keeps the loop for any count.

    `metrics['loss']` is a Mean of the per-step loss; the others are updated with
    (targets, outputs). The call returns the mean loss of its own steps, the running value of
    every other metric, and the learning rate the last step used. With several replicas the
    state each replica updates from its own data (batch-norm statistics) is left to differ:
    the runner averages it where it is read (dsl.engine.replicas.make_reconcile_call).

    With a `strategy`, each step is `strategy.run(step, args=next(iterator))` (the iterator
    may be a distributed one), and the loss returned is the mean of this process's replicas (the epoch's metrics are combined across
    processes from their states, dsl.engine.metric_reduction, as for Horovod).
    """
    in_step = strategy.num_replicas_in_sync if strategy is not None else 1
    step = make_step(model, modeler, optimizer, metrics, wrap_tape, in_step, jit_gradients=jit_compile and strategy is not None,
                     replicas=None if jit_compile else replicas)
    # XLA cannot compile the iterator's `next`, so only the step itself is jit-compiled.
    if jit_compile and strategy is None:
        step = tf.function(step, jit_compile=True)
    run_step = _local_runner(step) if strategy is None else _strategy_runner(step, strategy)
    others = {name: metric for name, metric in metrics.items() if name != "loss"}

    @tf.function
    def train_call(iterator: Any, num_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        traces["train"] += 1  # runs at tracing time only
        if steps_per_call == 1:  # decided at tracing: one step, no loop around it
            outputs = {"loss": run_step(next(iterator))}
        else:
            total = tf.constant(0.0, tf.float32)
            for _ in tf.range(num_steps):
                total += run_step(next(iterator))
            outputs = {"loss": total / tf.cast(num_steps, tf.float32)}
        outputs.update({name: metric.result() for name, metric in others.items()})
        outputs["learning_rate"] = tf.cast(optimizer.learning_rate, tf.float32)
        return outputs

    return cast(StepCall, DirectCall(train_call))


def _local_runner(step: Step) -> Callable[[Any], tf.Tensor]:
    def run(batch: Any) -> tf.Tensor:
        features, targets = batch
        return step(features, targets)

    return run


def _strategy_runner(step: Step, strategy: tf.distribute.Strategy) -> Callable[[Any], tf.Tensor]:
    """The step in every replica; the mean of this process's replicas' losses (no communication)."""

    def run(batch: Any) -> tf.Tensor:
        losses = strategy.experimental_local_results(strategy.run(step, args=tuple(batch)))
        return tf.add_n(list(losses)) / len(losses)

    return run


def make_val_call(
    model: tf.keras.Model,
    modeler: Any,
    metrics: dict[str, tf.keras.metrics.Metric],
    traces: Counter[str],
) -> StepCall:
    """A `tf.function(iterator, num_steps)` evaluating `num_steps` batches in inference mode."""
    loss_metric = metrics["loss"]
    terms = loss_term_metrics(modeler, metrics)
    others = {name: metric for name, metric in metrics.items() if name != "loss" and name not in terms}

    @tf.function
    def val_call(iterator: Any, num_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        traces["val"] += 1
        for _ in tf.range(num_steps):
            features, targets = next(iterator)
            outputs = model(features, training=False)
            losses = modeler.loss(targets, outputs, model)
            # Weighted by what the batch's loss was divided by: its examples (a short last batch
            # counts for what it holds), or the count a modeler normalised by (a detector's positive
            # anchors, a translator's tokens). Then the phase's loss is the whole data's sum over
            # its count, whatever the batches (and ranks) it was cut into.
            examples = tf.cast(tf.shape(tf.nest.flatten(targets)[0])[0], tf.float32)
            weight = tf.cast(losses.get("weight", examples), tf.float32)
            loss_metric.update_state(losses["loss"], sample_weight=weight)
            for name, metric in terms.items():
                metric.update_state(losses[name], sample_weight=weight)
            for metric in others.values():
                metric.update_state(targets, outputs)
        outputs = {"loss": loss_metric.result()}
        outputs.update({name: metric.result() for name, metric in {**terms, **others}.items()})
        return outputs

    return cast(StepCall, val_call)  # tf.function is untyped


def make_predict_call(model: tf.keras.Model, modeler: Any, preprocess: Callable[[Any], Any] | None) -> Any:
    """A `tf.function(features)` for a batch as the inputter decodes it (before augmentation):
    the augmenter's eval preprocessing per example (None = none), then the modeler's predictions."""

    @tf.function
    def predict_call(features: Any) -> dict[str, tf.Tensor]:
        prepared = features if preprocess is None else tf.map_fn(preprocess, features)
        return cast(dict[str, tf.Tensor], modeler.predictions(model(prepared, training=False)))

    return predict_call


def phase_metrics(modeler: Any, mode: str) -> dict[str, tf.keras.metrics.Metric]:
    """`mode`'s metrics: `loss` (a Mean), a Mean per part of the loss the modeler reports apart
    (`loss_terms()`, e.g. cross_entropy and l2_loss), then the modeler's own."""
    terms: list[str] = getattr(modeler, "loss_terms", lambda: [])()
    return {"loss": tf.keras.metrics.Mean(name=f"{mode}_loss"),
            **{term: tf.keras.metrics.Mean(name=f"{mode}_{term}") for term in terms},
            **modeler.metrics(mode)}
