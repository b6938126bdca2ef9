"""The train data: one stream through every epoch, each epoch exactly the inputter's batches
for that epoch's seed.

A new pipeline per epoch used to stall every epoch boundary (docs/benchmarks.md, P6);
DataFeed now builds one dataset whose epochs follow each other. These tests hold it to
giving, epoch after epoch, exactly what the inputter gives for each epoch alone (with an
int seed), to starting at any position (resume), to any shard (an elastic resize), and to
cutting a shard's extra batch instead of running it into the next epoch.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from pipeline_support import typed_pipeline

from backends.local import LocalBackend
from dsl.distributed.scaling import steps_per_epoch
from dsl.engine.compiler import configure_tensorflow
from dsl.engine.data_feed import DataFeed, epoch_seed
from dsl.language.context import BuildContext
from dsl.language.registry import lookup
from dsl.tasks.image_classification.cifar import CifarAugmenter


@pytest.fixture(autouse=True)
def seeded() -> None:
    """TensorFlow seeded as `dslrun` seeds it, not as an earlier test of the session left it."""
    configure_tensorflow(typed_pipeline(seed=7))


class Sharded(LocalBackend):
    """A local backend whose shard can be changed, as an elastic resize changes it."""

    shards, index = 1, 0

    @property
    def num_shards(self) -> int:
        return self.shards

    @property
    def shard_index(self) -> int:
        return self.index


def feed(backend: LocalBackend | None = None, examples: int = 96, cache: bool = False,
         drop_remainder: bool = True) -> DataFeed:
    section = {"type": "synthetic", "num_examples": {"train": examples, "val": 0, "test": 0}, "batch_size": 16,
               "pool_size": 40, "cache": cache, "drop_remainder": drop_remainder}
    inputter = lookup("inputter", "synthetic").builder(section, BuildContext())
    augmenter = CifarAugmenter({"padding": 2, "crop": True, "horizontal_flip": True, "brightness": 0.0,
                                "contrast": None, "standardize": True})
    return DataFeed(inputter, augmenter, backend or LocalBackend(), batch_size=16, seed=7)


def alone(data: DataFeed, epoch: int, backend: LocalBackend | None = None) -> list[np.ndarray]:
    """The images of every batch the inputter gives for `epoch` built on its own, int seed."""
    backend = backend or LocalBackend()
    dataset = data.inputter.dataset("train", data.augmenter.train, backend.num_shards, backend.shard_index,
                                    seed=epoch_seed(data.seed, epoch))
    return [images.numpy() for images, _ in dataset]


def taken(iterator, steps: int) -> list[np.ndarray]:
    return [next(iterator)[0].numpy() for _ in range(steps)]


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for one, other in zip(got, want):
        np.testing.assert_array_equal(one, other)


@pytest.mark.parametrize("cache", [False, True])
def test_one_stream_gives_each_epoch_as_the_inputter_gives_it_alone(cache: bool) -> None:
    data = feed(cache=cache)
    stream = data.train_iterator(0, 0, steps_per_epoch=6)
    epochs = [taken(stream, 6) for _ in range(3)]
    for number, got in enumerate(epochs):
        assert_same(got, alone(data, number))
    assert not np.array_equal(epochs[0][0], epochs[1][0])  # epochs differ


@pytest.mark.parametrize("seed", [0, 2**31 - 1])
def test_a_pipeline_seed_tensorflow_reads_as_zero_still_gives_its_epochs(seed: int) -> None:
    """TensorFlow takes seeds modulo 2**31 - 1, and with a global seed of 0 tf.data refuses a
    tensor seed (it compares the pair with (0, 0) in Python): `seed: 0` must still train."""
    configure_tensorflow(typed_pipeline(seed=seed))
    data = feed()
    data.seed = seed
    stream = data.train_iterator(0, 0, steps_per_epoch=6)
    assert_same(taken(stream, 12), alone(data, 0) + alone(data, 1))


def test_a_stream_starts_anywhere_in_any_shard() -> None:
    data = feed()
    resumed = data.train_iterator(1, 2, steps_per_epoch=6)  # a resume mid-epoch
    assert_same(taken(resumed, 4 + 6), alone(data, 1)[2:] + alone(data, 2))
    backend = Sharded()
    backend.shards, backend.index = 2, 1  # the world grew
    grown = feed(backend)
    assert_same(taken(grown.train_iterator(2, 0, steps_per_epoch=3), 6), alone(grown, 2, backend) + alone(grown, 3, backend))


def test_an_extra_batch_of_one_shard_stays_in_its_epoch() -> None:
    backend = Sharded()
    backend.shards, backend.index = 2, 0
    # 65 examples: shard 0 holds 33 (3 batches, the last of one example), shard 1 holds 32.
    data = feed(backend, examples=65, drop_remainder=False)
    assert len(alone(data, 0, backend)) == 3
    steps = steps_per_epoch(65, 16, 2, drop_remainder=False)
    assert steps == 2  # every rank runs as many steps as the smallest shard has batches
    stream = data.train_iterator(0, 0, steps)
    assert_same(taken(stream, 4), alone(data, 0, backend)[:2] + alone(data, 1, backend)[:2])


def test_every_shard_is_shuffled_its_own_way() -> None:
    """With one seed for every shard, rank r's k-th example was always listing entry k*N + r:
    a step's global batch held N neighbours of the listing at each position (of one class,
    in an image folder), and a 4-rank MLP learned 3x slower than one process."""
    inputter = feed().inputter
    positions = []
    for index in range(2):
        shard = tf.data.Dataset.range(96).shard(2, index)
        order = [int(n) for n in inputter._shuffled(shard, "train", 2, seed=5, shard_index=index)]
        assert sorted(order) == list(range(index, 96, 2))
        positions.append([(n - index) // 2 for n in order])
    assert positions[0] != positions[1]
    # One process (shard 0) keeps the order it always had.
    alone = [int(n) for n in inputter._shuffled(tf.data.Dataset.range(96), "train", 1, seed=5)]
    assert alone == [int(n) for n in tf.data.Dataset.range(96).shuffle(min(96, inputter.params["shuffle_buffer"]), seed=5)]


def test_a_resume_leaves_out_the_skipped_examples_before_reading_them(tmp_path) -> None:
    """Resumed at batch 3, the images of batches 0-2 are never read (they are deleted here):
    the inputter skips raw examples, not decoded batches, and the batches that follow are the
    uninterrupted epoch's."""
    from PIL import Image

    rows = []
    for index in range(48):
        Image.fromarray(np.full((4, 4, 3), index, np.uint8)).save(tmp_path / f"{index}.png")
        rows.append(f"{index}.png,{index % 2}")
    (tmp_path / "train.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    section = {"type": "image_classification_csv", "train": str(tmp_path / "train.csv"), "num_classes": 2,
               "image_shape": [4, 4, 3], "batch_size": 8}
    component = lookup("inputter", "image_classification_csv")
    section.update({k: v["default"] for k, v in component.params.items() if k not in section and "default" in v})
    section["shuffle_buffer"] = 0  # the file order: the first three batches are images 0-23
    inputter = component.builder(section, BuildContext())
    augmenter = CifarAugmenter({"padding": 1, "crop": True, "horizontal_flip": True, "brightness": 0.0,
                                "contrast": None, "standardize": False})
    data = DataFeed(inputter, augmenter, LocalBackend(), batch_size=8, seed=7)
    whole = taken(data.train_iterator(0, 0, steps_per_epoch=6), 6 + 2)
    for index in range(24):
        (tmp_path / f"{index}.png").unlink()
    resumed = taken(data.train_iterator(0, 3, steps_per_epoch=6), 3)
    assert_same(resumed, whole[3:6])  # augmentation seeds kept their positions
    for index in range(24):
        Image.fromarray(np.full((4, 4, 3), index, np.uint8)).save(tmp_path / f"{index}.png")
    section["skip_corrupt"] = True  # which examples fill an epoch is known after decoding: skipped after it
    data = DataFeed(component.builder(section, BuildContext()), augmenter, LocalBackend(), batch_size=8, seed=7)
    assert_same(taken(data.train_iterator(0, 3, steps_per_epoch=6), 3), whole[3:6])
