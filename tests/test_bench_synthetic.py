"""The benchmarks' input: the synthetic inputter's batch-at-a-time path gives the shared pipeline's batches."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from dsl.augmenters.none import Identity
from dsl.engine.data_feed import eval_transform
from dsl.inputters.pipeline import changes_data
from dsl.language.context import BuildContext
from dsl.language.registry import lookup


def synthetic(**params):
    section = {"type": "synthetic", "num_examples": {"train": 300, "val": 70, "test": 0}, "batch_size": 16,
               "pool_size": 50, **params}
    return lookup("inputter", "synthetic").builder(section, BuildContext())


def batches(dataset) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(images.numpy(), labels.numpy()) for images, labels in dataset]


@pytest.mark.parametrize("mode", ["train", "val"])
@pytest.mark.parametrize("shards", [(1, 0), (3, 1)])
def test_identity_augmenter_takes_the_batched_path_with_the_same_batches(mode, shards):
    """With `augmenter: none` the images are gathered a batch at a time (what the benchmark
    runs); an augmenter that is not declared unchanging takes the shared per-example path.
    Both must give the same examples in the same order, short last batch included."""
    inputter = synthetic()
    identity = Identity().train if mode == "train" else eval_transform(Identity())
    unchanging = lambda features, targets: (features, targets)  # noqa: E731 - not declared unchanging
    assert not changes_data(identity) and changes_data(unchanging)
    fast = batches(inputter.dataset(mode, identity, *shards, seed=5))
    shared = batches(inputter.dataset(mode, unchanging, *shards, seed=5))
    assert len(fast) == len(shared) > 1
    for (images, labels), (images_shared, labels_shared) in zip(fast, shared):
        np.testing.assert_array_equal(images, images_shared)
        np.testing.assert_array_equal(labels, labels_shared)


def test_batched_path_reshuffles_by_seed_and_keeps_static_batch_shape():
    inputter = synthetic()
    first = batches(inputter.dataset("train", None, seed=1))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(first, batches(inputter.dataset("train", None, seed=2))))
    assert inputter.dataset("train", None).element_spec[0].shape.as_list() == [16, 32, 32, 3]
