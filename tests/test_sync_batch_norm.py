"""`sync_batch_norm: auto` (dsl/distributed/sync_batch_norm.py): the decision, and the switchable layers an
elastic run re-decides with (backends/_sync_batch_norm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dsl.distributed.sync_batch_norm import SMALL_BATCH, decide

SWITCH = "horovod.sync_batch_norm"


@pytest.mark.parametrize(("batch", "replicas", "normalises", "on"), [
    (8, 4, True, True),  # cnn_iters: global 32 on 4 ranks
    (SMALL_BATCH, 2, True, False),  # 16 per replica is enough
    (8, 4, False, False),  # nothing to normalise
    (8, 1, True, False),  # one replica: its batch is the global batch
])
def test_auto_synchronises_batch_norm_below_16_per_replica(batch: int, replicas: int, normalises: bool, on: bool) -> None:
    assert decide({}, SWITCH, batch, replicas, normalises).on is on


def test_true_and_false_force_it_and_a_backend_without_a_switch_cannot() -> None:
    assert decide({"horovod": {"sync_batch_norm": True}}, SWITCH, 64, 2, True).on
    assert not decide({"horovod": {"sync_batch_norm": False}}, SWITCH, 4, 8, True).on
    none = decide({}, None, 4, 8, True)
    assert not none.on and "this backend cannot synchronise" in none.describe()


def test_an_elastic_resize_decides_again_at_the_new_size() -> None:
    """4 ranks of 8 synchronise; shrunk to 2 ranks of 16 they need not; forced stays forced."""
    auto = decide({}, SWITCH, 8, 4, True)
    assert auto.on and auto.describe() == "sync batch norm on (auto: 8 examples per replica, below 16)"
    shrunk = auto.at(16, 2)
    assert not shrunk.on and shrunk.describe() == "sync batch norm off (auto: 16 examples per replica, at least 16)"
    assert shrunk.at(8, 4).on
    forced = decide({"horovod": {"sync_batch_norm": False}}, SWITCH, 8, 4, True)
    assert not forced.at(4, 8).on and forced.describe() == "sync batch norm off (runner.horovod.sync_batch_norm: false)"


def test_switchable_layers_switched_off_normalise_like_plain_batch_norm() -> None:
    """What an elastic run with auto trains on while the shares are large: the plain statistics
    (switched on, tests/test_batch_moments.py and tests/test_horovod.py)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("horovod.tensorflow")
    from backends._sync_batch_norm import convert_batch_norm, horovod_switchable, set_synchronised
    from dsl.language.context import BuildContext
    from dsl.tasks.image_classification import simple_cnn

    context = BuildContext(image_shape=(8, 8, 3), num_classes=3)
    model = simple_cnn.build({"filters": [4], "dense_units": 8, "batch_norm": True}, context)
    converted = convert_batch_norm(model, horovod_switchable())
    assert set_synchronised(converted, False) == 1
    assert convert_batch_norm(converted, horovod_switchable()) is converted  # a resize keeps the model
    images = np.random.default_rng(0).random((4, 8, 8, 3), np.float32)
    np.testing.assert_allclose(converted(images, training=True), model(images, training=True), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("network", "expected"), [
    ({"type": "retinanet"}, True),  # its small backbone normalises every convolution, without a parameter saying so
    ({"type": "retinanet", "backbone": "VGG16"}, False),
    ({"type": "keras_application", "name": "MobileNetV2"}, True),
    ({"type": "keras_application", "name": "ConvNeXtTiny"}, False),  # layer normalisation
    ({"type": "fcn", "backbone": "ResNet50"}, True),
    ({"type": "simple_cnn", "batch_norm": True}, True),  # its parameters say
    ({"type": "simple_cnn", "batch_norm": False}, False),
    ({"type": "resnet_cifar", "batch_norm_momentum": 0.997}, True),
])
def test_validate_knows_which_networks_normalise_before_building_them(network: dict, expected: bool) -> None:
    """validate --world-size 2 decided 'off' for a detector whose run then said 'on (auto ...)', and a
    forced false gave no warning: the network types that always normalise now say so (register(batch_norm=))."""
    from dsl.distributed.sync_batch_norm import normalises

    assert normalises(network) is expected
