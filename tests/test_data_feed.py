"""The train data of each epoch: built ahead while the previous epoch trains, and the same data.

Building a new epoch's pipeline (tracing its map functions, making its iterator) used to
stall every epoch boundary (docs/benchmarks.md, P6); DataFeed now builds the next epoch's
iterator in a thread. These tests hold it to giving exactly the batches a fresh build
gives, and to never handing out an iterator built for another position or world.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from backends.local import LocalBackend
from dsl.augmenters.cifar import CifarAugmenter
from dsl.context import BuildContext
from dsl.engine.data_feed import DataFeed
from dsl.registry import lookup


class Sharded(LocalBackend):
    """A local backend whose shard can be changed, as an elastic resize changes it."""

    shards, index = 1, 0

    @property
    def num_shards(self) -> int:
        return self.shards

    @property
    def shard_index(self) -> int:
        return self.index


def feed(backend: LocalBackend | None = None) -> DataFeed:
    section = {"type": "synthetic", "num_examples": {"train": 96, "val": 0, "test": 0}, "batch_size": 16,
               "pool_size": 40}
    inputter = lookup("inputter", "synthetic").builder(section, BuildContext(pipeline={}))
    augmenter = CifarAugmenter({"padding": 2, "crop": True, "horizontal_flip": True, "brightness": 0.0,
                                "contrast": None, "standardize": True})
    return DataFeed(inputter, augmenter, backend or LocalBackend(), batch_size=16, seed=7)


def epoch(iterator, steps: int = 6) -> list[np.ndarray]:
    return [next(iterator)[0].numpy() for _ in range(steps)]


def test_the_epochs_built_ahead_give_the_batches_a_fresh_build_gives() -> None:
    ahead = feed()
    built_ahead = [epoch(ahead.train_iterator(e, 0)) for e in range(3)]
    assert ahead._ahead is not None and ahead._ahead[0][:2] == (3, 0)  # the next one is on its way
    fresh = feed()
    for e in range(3):
        expected = epoch(iter(fresh.train(e, 0)()))
        for got, want in zip(built_ahead[e], expected):
            np.testing.assert_array_equal(got, want)
    assert not np.array_equal(built_ahead[0][0], built_ahead[1][0])  # epochs differ


def test_an_iterator_built_for_another_position_or_world_is_not_used() -> None:
    backend = Sharded()
    data = feed(backend)
    data.train_iterator(0, 0)
    resumed = epoch(data.train_iterator(1, 2), 4)  # a resume mid-epoch: not the one built ahead
    np.testing.assert_array_equal(resumed[0], epoch(iter(feed().train(1, 2)()), 1)[0])
    backend.shards, backend.index = 2, 1  # the world grew: the epoch 2 built ahead has one shard
    grown = epoch(data.train_iterator(2, 0), 3)
    one_shard = epoch(iter(feed().train(2, 0)()), 1)[0]
    np.testing.assert_array_equal(grown[0], epoch(iter(feed(backend).train(2, 0)()), 1)[0])
    assert not np.array_equal(grown[0], one_shard)
