"""Networks: output shapes, sizes, variable names, option-A shortcut, keras_application weights."""

from __future__ import annotations

import os
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import lookup

tf = pytest.importorskip("tensorflow")

OWN_NETWORKS = ("mlp", "simple_cnn", "resnet_cifar")


def build(network_type: str, params: dict | None = None, shape=(16, 16, 3), classes: int = 10):
    context = BuildContext(image_shape=shape, num_classes=classes)
    return lookup("network", network_type).builder({"type": network_type, **(params or {})}, context)


def trainable_size(model) -> int:
    return sum(int(v.shape.num_elements()) for v in model.trainable_variables)


@pytest.mark.parametrize("shape", [(16, 16, 3), (32, 32, 3), (8, 8, 1)])
@pytest.mark.parametrize("network_type", OWN_NETWORKS)
def test_network_maps_images_to_logits(network_type, shape):
    params = {"depth": 20} if network_type == "resnet_cifar" else {}
    model = build(network_type, params, shape=shape, classes=7)
    images = tf.random.uniform((2, *shape), seed=1)
    logits = model(images, training=False)
    assert logits.shape == (2, 7)
    assert logits.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy()))
    # Logits, not probabilities: the final layer has no softmax.
    assert model.layers[-1].name == "logits"
    assert model.layers[-1].get_config()["activation"] == "linear"


@pytest.mark.parametrize(
    "depth, low, high",
    [(20, 0.26e6, 0.28e6), (32, 0.45e6, 0.48e6), (56, 0.84e6, 0.87e6)],
)
def test_resnet_size_matches_the_paper(depth, low, high):
    # He et al. 2016, table 6: ResNet-20 0.27M, -32 0.46M, -56 0.85M parameters (option A).
    model = build("resnet_cifar", {"depth": depth, "shortcut": "padding"}, shape=(32, 32, 3))
    assert low <= trainable_size(model) <= high
    # 6n+2 weighted layers: the convolutions plus the dense layer (option A adds no trainable conv).
    weighted = [v for v in model.trainable_variables if v.name.endswith("kernel:0")]
    assert len(weighted) == depth


def test_resnet_projection_adds_two_shortcut_convolutions():
    padding = build("resnet_cifar", {"depth": 20, "shortcut": "padding"}, shape=(32, 32, 3))
    projection = build("resnet_cifar", {"depth": 20, "shortcut": "projection"}, shape=(32, 32, 3))
    shortcut_convs = [v.name for v in projection.trainable_variables if "shortcut_conv" in v.name]
    assert shortcut_convs == ["stage2_block1_shortcut_conv/kernel:0", "stage3_block1_shortcut_conv/kernel:0"]
    # 1x1 convs 16->32 and 32->64, plus a batch norm (gamma, beta) after each.
    assert trainable_size(projection) - trainable_size(padding) == 16 * 32 + 32 * 64 + 2 * (32 + 64)


def test_resnet_padding_shortcut_is_subsample_plus_zero_channels():
    model = build("resnet_cifar", {"depth": 20, "shortcut": "padding"}, shape=(8, 8, 3))
    layer = model.get_layer("stage2_block1_shortcut_pad")
    assert not layer.trainable_weights
    x = tf.random.normal((2, 8, 8, 16), seed=3)
    expected = tf.pad(x[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0], [0, 16]])
    np.testing.assert_allclose(layer(x).numpy(), expected.numpy(), atol=1e-6)


def test_resnet_batch_norm_settings_reach_the_layers():
    model = build("resnet_cifar", {"depth": 20, "batch_norm_momentum": 0.9, "batch_norm_epsilon": 1e-3})
    norms = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    assert len(norms) == 19 + 2  # one per conv, plus one per projection shortcut
    assert {(n.momentum, n.epsilon) for n in norms} == {(0.9, 1e-3)}
    default = build("resnet_cifar", {"depth": 20})
    first = default.get_layer("initial_batch_normalization")
    assert (first.momentum, first.epsilon) == (0.997, 1e-5)


def test_num_classes_param_wins_over_the_inputter():
    model = build("mlp", {"num_classes": 3}, classes=10)
    assert model.output_shape == (None, 3)


def test_simple_cnn_and_mlp_options_shape_the_model():
    cnn = build("simple_cnn", {"filters": [4, 8, 8], "dense_units": 0, "batch_norm": True, "dropout": 0.5})
    names = [layer.name for layer in cnn.layers]
    assert [n for n in names if n.startswith("conv_")] == ["conv_1", "conv_2", "conv_3"]
    assert "dense" not in names and "dropout" in names
    assert not any(v.name.startswith("conv_") and v.name.endswith("bias:0") for v in cnn.variables)
    assert cnn.get_layer("pool_3").output_shape == (None, 2, 2, 8)  # 16 -> 8 -> 4 -> 2
    mlp = build("mlp", {"hidden_units": [], "dropout": 0.0})
    assert [layer.name for layer in mlp.layers] == ["images", "flatten", "logits"]  # linear classifier
    gelu = build("mlp", {"hidden_units": [5, 6], "activation": "gelu"})
    assert gelu.get_layer("hidden_2").get_config()["activation"] == "gelu"


@pytest.mark.parametrize(
    "network_type, params",
    [("resnet_cifar", {"depth": 20}), ("simple_cnn", {"batch_norm": True}), ("mlp", {})],
)
def test_variable_names_are_stable_and_matchable(network_type, params):
    first = [v.name for v in build(network_type, params).variables]
    second = [v.name for v in build(network_type, params).variables]
    assert first == second  # no `_1` suffixes when a model is built twice in one process
    for name in first:
        layer, weight = name.split("/")
        if weight in ("gamma:0", "beta:0", "moving_mean:0", "moving_variance:0"):
            assert "batch_normalization" in layer
        else:
            assert weight in ("kernel:0", "bias:0"), name


def test_network_schemas_document_every_parameter():
    for network_type in (*OWN_NETWORKS, "keras_application"):
        component = lookup("network", network_type)
        jsonschema.Draft202012Validator.check_schema(component.schema())
        for name, spec in component.params.items():
            assert spec.get("description"), (network_type, name)
            assert "default" in spec or name in component.required, (network_type, name)


def test_network_modules_do_not_import_tensorflow():
    code = (
        "import sys, dsl.networks.mlp, dsl.tasks.image_classification.simple_cnn, dsl.tasks.image_classification.resnet_cifar, "
        "dsl.networks.keras_application; print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# keras_application -----------------------------------------------------------------------


def test_application_names_match_tensorflow():
    from dsl.networks.keras_application import APPLICATIONS

    applications = tf.keras.applications
    constructors = {n for n in dir(applications) if n[:1].isupper() and callable(getattr(applications, n))}
    assert set(APPLICATIONS) == constructors


def test_application_schema_rejects_imagenet_and_unknown_names():
    schema = lookup("network", "keras_application").schema()
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"type": "keras_application", "name": "MobileNet", "weights": "w.h5"})
    assert validator.is_valid({"type": "keras_application", "name": "MobileNet", "weights": None})
    assert not validator.is_valid({"type": "keras_application", "name": "MobileNet", "weights": "imagenet"})
    assert not validator.is_valid({"type": "keras_application", "name": "mobilenet"})
    assert not validator.is_valid({"type": "keras_application"})
    with pytest.raises(DslError, match=r"network.weights.*never"):
        build("keras_application", {"name": "MobileNet", "weights": "imagenet"}, shape=(32, 32, 3))


def test_application_missing_weights_file_names_the_key(tmp_path):
    missing = str(tmp_path / "nothing.h5")
    with pytest.raises(DslError, match=r"network\.weights: no weights file .*nothing\.h5"):
        build("keras_application", {"name": "MobileNet", "weights": missing}, shape=(32, 32, 3))


def test_application_too_small_images_name_the_model():
    with pytest.raises(DslError, match=r"network\.name: InceptionV3 cannot be built .*75x75"):
        build("keras_application", {"name": "InceptionV3"}, shape=(32, 32, 3))


@pytest.mark.slow
def test_application_builds_logits_and_loads_saved_weights(tmp_path):
    model = build("keras_application", {"name": "MobileNet"}, shape=(32, 32, 3), classes=4)
    logits = model(tf.random.uniform((2, 32, 32, 3), seed=2), training=False).numpy()
    assert logits.shape == (2, 4)
    assert not np.allclose(logits.sum(axis=1), 1.0)  # no softmax on top
    h5_file, checkpoint = str(tmp_path / "w.h5"), str(tmp_path / "ckpt" / "w")
    model.save_weights(h5_file)
    model.save_weights(checkpoint)
    for path in (h5_file, checkpoint):
        loaded = build("keras_application", {"name": "MobileNet", "weights": path}, shape=(32, 32, 3), classes=4)
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.variables, loaded.variables))
    with pytest.raises(DslError, match=r"network\.weights: cannot load .*same model"):
        build("keras_application", {"name": "MobileNet", "weights": h5_file}, shape=(32, 32, 3), classes=5)
