"""Swap a network's BatchNormalization layers for synchronised ones (`runner.horovod.sync_batch_norm`).

With small per-rank batches each rank's batch statistics are noisy, and the average of
per-rank variances misses the spread between the ranks' means. A synchronised layer
computes the mean and variance of the whole global batch in every training step (one
allgather per layer and step), so N ranks of b examples normalise as one process of N*b.

The network is rebuilt with `tf.keras.models.clone_model` (the pipeline's networks are
Keras functional models; nested functional models are rebuilt too), every layer keeping
its name, so variable names and checkpoints are unchanged, and the weights the network
was built with (a loaded weights file included) are copied over. Imports TensorFlow.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from dsl.language.errors import DslError

BatchNormalization = tf.keras.layers.BatchNormalization


def convert_batch_norm(model: tf.keras.Model, synced_class: Any,
                       setting: str = "runner.horovod.sync_batch_norm") -> tf.keras.Model:
    """`model` with every plain BatchNormalization layer made by `synced_class` (a class or a
    factory taking the layer's config; same configuration and weights); the model itself when
    it has none. `setting` is the pipeline key that asked for it, named in errors."""
    if not any(type(layer) is BatchNormalization for layer in model.submodules):
        return model
    if not _is_graph_network(model):
        raise DslError(
            f"{setting}: the network {model.name!r} is not a Keras functional or "
            "Sequential model, so its batch-norm layers cannot be swapped; set sync_batch_norm: false"
        )
    converted = _clone(model, synced_class)
    converted.set_weights(model.get_weights())
    return converted


def _clone(model: tf.keras.Model, synced_class: Any) -> tf.keras.Model:
    def clone_layer(layer: tf.keras.layers.Layer) -> tf.keras.layers.Layer:
        if type(layer) is BatchNormalization:
            # Synchronised statistics are computed op by op: there is no fused kernel for them.
            return synced_class(**{**layer.get_config(), "fused": False})
        if isinstance(layer, tf.keras.Model) and _is_graph_network(layer):
            return _clone(layer, synced_class)
        return layer.__class__.from_config(layer.get_config())

    return tf.keras.models.clone_model(model, clone_function=clone_layer)


def _is_graph_network(model: Any) -> bool:
    """Functional and Sequential models can be rebuilt from their config; subclassed ones cannot."""
    return bool(getattr(model, "_is_graph_network", False))


def horovod_switchable() -> type:
    """A batch-norm layer synchronised over Horovod's ranks, with a switch (`synchronised`) read
    when the train call is traced: off, it normalises over the rank's own batch like a plain
    (non-fused) layer. An elastic run with `sync_batch_norm: auto` decides again at every size
    (dsl/distributed/sync_batch_norm.py) and traces its calls again, so the same layers serve both decisions.

    On, each training call gathers every rank's per-channel count, mean and variance (one
    allgather, dsl/distributed/batch_moments.py) and normalises with the global batch's statistics,
    each rank weighted by its examples and without cancellation; Horovod's own
    SyncBatchNormalization weighs the ranks equally and takes mean(x^2) - mean^2. Imports Horovod."""
    import horovod.tensorflow as hvd

    from dsl.distributed.batch_moments import combine, local_moments

    base: Any = BatchNormalization  # tf.keras' layer, a runtime value to the type checker

    class SwitchableSyncBatchNormalization(base):
        synchronised = True

        def _moments(self, inputs: Any, reduction_axes: Any, keep_dims: Any, **keras_arguments: Any) -> Any:
            # keras_arguments: what Keras' layer passes on (its per-step weights for padded sequences).
            if not self.synchronised or hvd.size() == 1:
                return super()._moments(inputs, reduction_axes, keep_dims=keep_dims, **keras_arguments)
            gathered = _gather_rows(local_moments(inputs, reduction_axes, **keras_arguments))
            return combine(gathered, reduction_axes, keep_dims, dtype=inputs.dtype)

    @tf.custom_gradient
    def _gather_rows(row: tf.Tensor) -> Any:
        """Every rank's one-row `row`, concatenated. Its gradient is the sum of what every rank's
        loss asks of this rank's row: the ranks' gradients are averaged afterwards, as one
        process of the global batch would have them. (Horovod's allgather averages here, which
        would shrink the path through the batch statistics by the number of ranks.)"""
        def gradient(upstream: tf.Tensor) -> tf.Tensor:
            summed = hvd.allreduce(upstream, op=hvd.Sum)
            rank = hvd.rank_op()  # read when the step runs: an elastic resize can renumber the ranks
            return summed[rank:rank + 1]

        return hvd.allgather(row), gradient

    return SwitchableSyncBatchNormalization


def set_synchronised(model: tf.keras.Model, on: bool) -> int:
    """Switch every switchable layer of `model` (see `horovod_switchable`); how many there are."""
    layers = [layer for layer in model.submodules if hasattr(layer, "synchronised")]
    for layer in layers:
        layer.synchronised = on
    return len(layers)

