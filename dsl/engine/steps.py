"""The compiled step functions: k train steps per graph call, and one val pass per call.

Both take a `tf.data` iterator and a step count as tensors, so a new epoch's iterator or a
shorter last call reuses the same graph instead of retracing (`traces` counts tracings;
a test fails when a second epoch retraces).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from dsl.engine.precision import scaled_loss, unscaled_gradients
from dsl.engine.replicas import Average, reconcile, replica_local_variables


def make_train_call(
    model: tf.keras.Model,
    modeler: Any,
    optimizer: tf.keras.optimizers.Optimizer,
    metrics: dict[str, tf.keras.metrics.Metric],
    wrap_tape: Callable[[tf.GradientTape], Any],
    jit_compile: bool,
    traces: Counter,
    average: Average | None = None,
) -> Callable[[Any, tf.Tensor], dict[str, tf.Tensor]]:
    """A `tf.function(iterator, num_steps)` running `num_steps` optimizer steps.

    `metrics['loss']` is a Mean of the per-step loss; the others are updated with
    (labels, logits). The call returns the mean loss of its own steps, the running value of
    every other metric, and the learning rate the last step used. With several replicas,
    `average` (the backend's) reconciles the state each replica updated from its own data,
    such as batch-norm statistics, at the end of the call (see dsl.engine.replicas).
    """
    loss_metric = metrics["loss"]
    others = {name: metric for name, metric in metrics.items() if name != "loss"}

    def one_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = modeler.loss(labels, logits, model)["loss"]
            objective = scaled_loss(optimizer, loss)
        tape = wrap_tape(tape)
        variables = model.trainable_variables
        gradients = unscaled_gradients(optimizer, tape.gradient(objective, variables))
        optimizer.apply_gradients(zip(gradients, variables))
        for metric in others.values():
            metric.update_state(labels, logits)
        loss_metric.update_state(loss)
        return loss

    # XLA cannot compile the iterator's `next`, so only the step itself is jit-compiled.
    step = tf.function(one_step, jit_compile=True) if jit_compile else one_step

    @tf.function
    def train_call(iterator: Any, num_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        traces["train"] += 1  # runs at tracing time only
        total = tf.constant(0.0, tf.float32)
        for _ in tf.range(num_steps):
            images, labels = next(iterator)
            total += tf.cast(step(images, labels), tf.float32)
        if average is not None:
            reconcile(replica_local_variables(model), average)
        outputs = {"loss": total / tf.cast(num_steps, tf.float32)}
        outputs.update({name: metric.result() for name, metric in others.items()})
        outputs["learning_rate"] = tf.cast(optimizer.learning_rate, tf.float32)
        return outputs

    return train_call


def make_eval_call(
    model: tf.keras.Model,
    modeler: Any,
    metrics: dict[str, tf.keras.metrics.Metric],
    traces: Counter,
) -> Callable[[Any, tf.Tensor], dict[str, tf.Tensor]]:
    """A `tf.function(iterator, num_steps)` evaluating `num_steps` batches in inference mode."""
    loss_metric = metrics["loss"]
    others = {name: metric for name, metric in metrics.items() if name != "loss"}

    @tf.function
    def eval_call(iterator: Any, num_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        traces["val"] += 1
        for _ in tf.range(num_steps):
            images, labels = next(iterator)
            logits = model(images, training=False)
            loss = modeler.loss(labels, logits, model)["loss"]
            # Weighted by batch size: a short last batch counts for what it holds.
            loss_metric.update_state(loss, sample_weight=tf.cast(tf.shape(labels)[0], tf.float32))
            for metric in others.values():
                metric.update_state(labels, logits)
        outputs = {"loss": loss_metric.result()}
        outputs.update({name: metric.result() for name, metric in others.items()})
        return outputs

    return eval_call


def make_predict_call(model: tf.keras.Model, modeler: Any, preprocess: Callable[[tf.Tensor], tf.Tensor]) -> Any:
    """A `tf.function(images)` for images in [0, 1]: the eval preprocessing, then predictions."""

    @tf.function
    def predict_call(images: tf.Tensor) -> dict[str, tf.Tensor]:
        prepared = tf.map_fn(preprocess, images)
        return modeler.predictions(model(prepared, training=False))

    return predict_call
