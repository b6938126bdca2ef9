"""Which variables the replicas reconcile, and the sync-batch-norm conversion of a network."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from backends._sync_batch_norm import convert_batch_norm
from dsl.engine.replicas import reconcile, replica_local_variables
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.tasks.image_classification import resnet_cifar, simple_cnn


class MarkedBatchNormalization(tf.keras.layers.BatchNormalization):
    """Stands in for a synchronised layer (a subclass of the same Keras layer)."""

    def __init__(self, fused: bool | None = None, **kwargs: object) -> None:
        assert fused is False, "synchronised layers cannot use the fused kernel"
        super().__init__(fused=fused, **kwargs)


def context(image_size: int = 16) -> BuildContext:
    return BuildContext(image_shape=(image_size, image_size, 3), num_classes=4)


def test_moving_statistics_are_reconciled_and_trainable_or_frozen_weights_are_not() -> None:
    model = resnet_cifar.build({"depth": 20, "shortcut": "padding"}, context())
    chosen = {v.name for v in replica_local_variables(model)}
    moving = {v.name for v in model.variables if "moving_" in v.name}
    assert chosen == moving and len(moving) == 2 * 19
    # The padding shortcut's frozen identity kernel is non-trainable but never changes.
    assert any("shortcut_pad" in v.name for v in model.non_trainable_variables)


def test_a_network_without_batch_norm_has_nothing_to_reconcile() -> None:
    model = simple_cnn.build({"filters": [4], "dense_units": 8, "batch_norm": False}, context())
    assert replica_local_variables(model) == []


def test_reconcile_assigns_what_the_average_returns() -> None:
    model = simple_cnn.build({"filters": [4], "dense_units": 8, "batch_norm": True}, context())
    variables = replica_local_variables(model)
    reconcile(variables, lambda tensors: [t + 1.0 for t in tensors])
    for variable in variables:
        start = 0.0 if "moving_mean" in variable.name else 1.0
        np.testing.assert_array_equal(variable.numpy(), np.full(variable.shape, start + 1.0, np.float32))


def test_sync_batch_norm_swaps_every_layer_and_keeps_names_and_weights() -> None:
    model = resnet_cifar.build({"depth": 20}, context())
    images = np.random.default_rng(0).random((2, 16, 16, 3), np.float32)
    for variable in model.variables:  # distinct values, so a mix-up of weights would show
        variable.assign(np.random.default_rng(len(variable.name)).random(variable.shape, np.float32) + 0.5)
    converted = convert_batch_norm(model, MarkedBatchNormalization)
    norms = [layer for layer in converted.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    assert norms and all(type(layer) is MarkedBatchNormalization for layer in norms)
    assert [v.name for v in converted.variables] == [v.name for v in model.variables]
    for before, after in zip(model.variables, converted.variables):
        np.testing.assert_array_equal(after.numpy(), before.numpy(), err_msg=before.name)
    np.testing.assert_allclose(converted(images, training=False), model(images, training=False), rtol=1e-5)


def test_sync_batch_norm_leaves_a_network_without_batch_norm_alone() -> None:
    model = simple_cnn.build({"filters": [4], "dense_units": 8, "batch_norm": False}, context())
    assert convert_batch_norm(model, MarkedBatchNormalization) is model


def test_sync_batch_norm_converts_a_nested_functional_model() -> None:
    inner = simple_cnn.build({"filters": [4], "dense_units": 8, "batch_norm": True}, context())
    inputs = tf.keras.Input((16, 16, 3))
    outer = tf.keras.Model(inputs, inner(inputs), name="outer")
    converted = convert_batch_norm(outer, MarkedBatchNormalization)
    kinds = {type(m) for m in converted.submodules if isinstance(m, tf.keras.layers.BatchNormalization)}
    assert kinds == {MarkedBatchNormalization}


def test_sync_batch_norm_refuses_a_subclassed_network_clearly() -> None:
    class Custom(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__(name="custom")
            self.norm = tf.keras.layers.BatchNormalization()

        def call(self, inputs: tf.Tensor) -> tf.Tensor:
            return self.norm(inputs)

    model = Custom()
    model(tf.zeros((1, 4)))
    with pytest.raises(DslError, match="sync_batch_norm: the network 'custom' is not a Keras functional"):
        convert_batch_norm(model, MarkedBatchNormalization)


def test_sync_batch_norm_converts_a_keras_application() -> None:
    from dsl.networks import keras_application

    model = keras_application.build({"name": "MobileNetV2"}, context(32))
    converted = convert_batch_norm(model, MarkedBatchNormalization)
    norms = [layer for layer in converted.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    assert len(norms) == sum(isinstance(layer, tf.keras.layers.BatchNormalization) for layer in model.layers) > 10
    assert all(type(layer) is MarkedBatchNormalization for layer in norms)
    assert len(replica_local_variables(converted)) == 2 * len(norms)


def test_statistics_are_averaged_once_per_read_and_only_after_a_train_call() -> None:
    from dsl.engine.replicas import ReplicaState

    calls: list[int] = []
    state = ReplicaState()
    state.use(lambda: calls.append(1))
    state.average()  # nothing trained since the broadcast start: nothing to average
    state.after_call(read=False)  # the first call of a world averages: tracing and first run in step 1
    assert calls == [1]
    state.after_call(read=False)
    state.after_call(read=False)
    assert calls == [1]
    state.after_call(read=True)  # one average covers every call since the last
    state.average()
    assert calls == [1, 1]
    state.after_call(read=False)
    state.use(lambda: calls.append(2))  # a new world (elastic) starts from one broadcast state
    state.average()
    assert calls == [1, 1]


def test_the_checkpoint_callback_declares_its_step_cadence_as_reads() -> None:
    from dsl.callbacks.checkpoint import Checkpoint

    by_iters = Checkpoint({"every_n_iters": 3, "every_n_epochs": None})
    assert [after for after in range(1, 10) if by_iters.reads_replica_state(after - 1, after)] == [3, 6, 9]
    assert by_iters.reads_replica_state(4, 8) and not by_iters.reads_replica_state(3, 5)  # steps_per_call 4, 2
    # By epoch it saves at phase ends, which are averaged anyway.
    assert not Checkpoint({"every_n_iters": None, "every_n_epochs": 1}).reads_replica_state(0, 100)
