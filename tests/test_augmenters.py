"""Augmenters keep shapes, the eval path is deterministic and standardised, the train path is random but seeded."""

from __future__ import annotations

import os

import jsonschema
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import lookup

CONTEXT = BuildContext()


def augmenter(type_: str = "cifar", **params):
    section = {"type": type_, **params}
    jsonschema.Draft202012Validator(lookup("augmenter", type_).schema()).validate(section)
    return lookup("augmenter", type_).builder(section, CONTEXT)


def random_image(shape=(8, 8, 3), seed=0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).uniform(0, 1, shape), tf.float32)


def seed(a: int, b: int = 0) -> tf.Tensor:
    return tf.constant([a, b], tf.int64)


@pytest.mark.parametrize("type_", ["cifar", "none"])
def test_parameters_are_described_with_defaults(type_):
    component = lookup("augmenter", type_)
    jsonschema.Draft202012Validator.check_schema(component.schema())
    for name, spec in component.params.items():
        assert spec.get("description") and "default" in spec, name


def train_image(augmenter, image, seed=None):
    """The augmented image of a train example (image, class 0); the class must come back as it was."""
    image, label = augmenter.train(image, tf.constant(0), seed=seed)
    assert int(label) == 0
    return image


@pytest.mark.parametrize("shape", [(8, 8, 3), (32, 32, 3), (6, 10, 1)])
def test_cifar_keeps_shape_and_dtype(shape):
    cifar = augmenter(brightness=0.2, contrast=[0.7, 1.3])
    for output in (train_image(cifar, random_image(shape), seed=seed(1)), train_image(cifar, random_image(shape)),
                   cifar.eval(random_image(shape))):
        assert output.shape == shape and output.dtype == tf.float32


def test_cifar_eval_is_deterministic_and_standardised():
    cifar = augmenter()
    image = random_image((16, 16, 3)) * 0.3 + 0.5
    first, second = cifar.eval(image).numpy(), cifar.eval(image).numpy()
    np.testing.assert_array_equal(first, second)
    assert abs(first.mean()) < 1e-5 and abs(first.std() - 1.0) < 1e-3
    trained = train_image(cifar, image, seed=seed(5)).numpy()
    assert abs(trained.mean()) < 1e-5 and abs(trained.std() - 1.0) < 1e-2  # same normalisation on both paths


def test_cifar_train_follows_its_seed():
    cifar = augmenter(padding=2)
    image = random_image((8, 8, 3))
    same = [train_image(cifar, image, seed=seed(3)).numpy() for _ in range(2)]
    np.testing.assert_array_equal(same[0], same[1])
    outputs = {train_image(cifar, image, seed=seed(3, i)).numpy().tobytes() for i in range(8)}
    assert len(outputs) > 1


def test_cifar_crop_shifts_by_at_most_the_padding_and_flips():
    cifar = augmenter(padding=2, horizontal_flip=False, standardize=False)
    image = np.zeros((8, 8, 1), np.float32)
    image[4, 4, 0] = 1.0
    shifts = set()
    for i in range(30):
        out = train_image(cifar, tf.constant(image), seed=seed(i)).numpy()
        found = np.argwhere(out[..., 0] == 1.0)
        assert len(found) == 1 and out.sum() == 1.0  # a shifted copy, zero padding elsewhere
        dy, dx = found[0] - 4
        assert abs(dy) <= 2 and abs(dx) <= 2
        shifts.add((dy, dx))
    assert len(shifts) > 3
    flipper = augmenter(crop=False, horizontal_flip=True, standardize=False)
    columns = {int(np.argwhere(train_image(flipper, tf.constant(image), seed=seed(i)).numpy()[..., 0])[0][1]) for i in range(20)}
    assert columns == {4, 3}  # unflipped, or mirrored (8 - 1 - 4)


def test_cifar_brightness_and_contrast_stay_in_range_without_standardize():
    cifar = augmenter(padding=0, brightness=0.5, contrast=[0.5, 1.5], standardize=False)
    for i in range(10):
        out = train_image(cifar, random_image(seed=i), seed=seed(i)).numpy()
        assert out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_array_equal(cifar.eval(random_image()).numpy(), random_image().numpy())


def test_cifar_contrast_bounds_must_be_ordered():
    with pytest.raises(DslError, match=r"augmenter\.contrast: lower 1\.2 must be below upper 0\.8"):
        augmenter(contrast=[1.2, 0.8])


def test_cifar_in_a_graph_without_a_seed_uses_the_global_seed():
    cifar = augmenter()
    def dataset():
        return tf.data.Dataset.from_tensors((random_image(), 0)).repeat(4).map(cifar.train).map(lambda image, label: image)
    tf.random.set_seed(11)
    first = np.stack(list(dataset().as_numpy_iterator()))
    tf.random.set_seed(11)
    second = np.stack(list(dataset().as_numpy_iterator()))
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first[0], first[1])  # every example drawn afresh


def test_eval_works_under_map_fn_as_predict_and_export_use_it():
    cifar = augmenter()
    batch = tf.stack([random_image(seed=i) for i in range(3)])
    out = tf.function(lambda images: tf.map_fn(cifar.eval, images))(batch).numpy()
    assert out.shape == (3, 8, 8, 3) and np.allclose(out.mean(axis=(1, 2, 3)), 0, atol=1e-5)


def test_none_is_the_identity_on_both_paths():
    none = augmenter("none")
    image = random_image()
    np.testing.assert_array_equal(train_image(none, image).numpy(), image.numpy())
    np.testing.assert_array_equal(train_image(none, image, seed=seed(1)).numpy(), image.numpy())
    np.testing.assert_array_equal(none.eval(image).numpy(), image.numpy())
    assert lookup("augmenter", "none").builder({"type": "none"}, CONTEXT) is not None  # the compiler's default
