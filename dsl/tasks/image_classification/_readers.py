"""The inputters whose raw examples are not listed image files: CIFAR-10 records, TFRecords, generated data.

Private and TensorFlow-importing; the public modules check their files and import these
classes inside `build`. The pipeline itself (shard, shuffle, decode, ...) is `BaseInputter`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.inputters.common import MODES
from dsl.inputters.pipeline import (
    ASSERT_MARKER,
    BaseInputter,
    changes_data,
    decode_image,
    fit_image,
    label_checked,
    leave_out,
    parallelism,
    skipped_examples,
)
from dsl.tasks.image_classification._cifar10_format import CHANNELS, CLASS_NAMES, HEIGHT, LABEL_BYTES, RECORD_BYTES, WIDTH


class CountedInputter(BaseInputter):
    """An inputter whose example counts per mode were found when it was built."""

    def __init__(self, params: dict[str, Any], counts: dict[str, int], image_shape: Any, num_classes: int) -> None:
        super().__init__(params, image_shape, num_classes)
        self.counts = dict(counts)

    def num_examples(self, mode: str) -> int:
        return self.counts.get(mode, 0)


class Cifar10Inputter(CountedInputter):
    """Fixed-length CIFAR-10 records: 1 label byte, then the R, G, B planes of 32x32 pixels."""

    class_names = CLASS_NAMES

    def __init__(self, params: dict[str, Any], files: dict[str, list[Path]], counts: dict[str, int]) -> None:
        super().__init__(params, counts, tuple(params["image_shape"]), len(CLASS_NAMES))
        self.files = files

    def _raw(self, mode: str) -> tf.data.Dataset:
        return tf.data.FixedLengthRecordDataset([str(path) for path in self.files[mode]], RECORD_BYTES)

    def _decode(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        values = tf.io.decode_raw(record, tf.uint8)
        label = tf.cast(values[0], tf.int32)
        planes = tf.reshape(values[LABEL_BYTES:], [CHANNELS, HEIGHT, WIDTH])
        image = tf.image.convert_image_dtype(tf.transpose(planes, [1, 2, 0]), tf.float32)
        return fit_image(image, self.image_shape), label


class TFRecordInputter(CountedInputter):
    """tf.train.Example records; each record travels with its file name, so errors can name it."""

    def __init__(self, params: dict[str, Any], files: dict[str, list[Path]], counts: dict[str, int]) -> None:
        super().__init__(params, counts, tuple(params["image_shape"]), params["num_classes"])
        self.files = files
        self.features = {
            params["image_key"]: tf.io.FixedLenFeature([], tf.string, default_value=""),
            params["label_key"]: tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        }

    def _raw(self, mode: str) -> tf.data.Dataset:
        names = tf.data.Dataset.from_tensor_slices([str(path) for path in self.files[mode]])
        return names.flat_map(lambda name: tf.data.TFRecordDataset(name).map(lambda record: (record, name)))

    def _decode(self, record: tf.Tensor, file_name: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image_key, label_key = self.params["image_key"], self.params["label_key"]
        example = tf.io.parse_single_example(record, self.features)
        contents = example[image_key]
        check = tf.debugging.Assert(
            tf.strings.length(contents) > 0,
            [ASSERT_MARKER, "a record of", file_name, f"has no (or an empty) feature {image_key!r};",
             "set inputter.image_key to the feature holding the encoded image"],
        )
        with tf.control_dependencies([check]):
            image = decode_image(contents, self.image_shape)
        label = label_checked(example[label_key], self.num_classes, file_name)
        return image, label


class SyntheticInputter(CountedInputter):
    """Generated images, one pool per mode, indexed by example number; see dsl/tasks/image_classification/synthetic.py.

    Raw examples are indices into one tensor holding every mode's pool, so shuffling moves
    integers, and "decoding" is a gather.
    """

    def __init__(self, params: dict[str, Any], counts: dict[str, int]) -> None:
        super().__init__(params, counts, tuple(params["image_shape"]), params["num_classes"])
        seed, classes = params["seed"], self.num_classes
        height, width, channels = self.image_shape
        # Class colours depend on the seed only, so every mode shares them.
        colours = tf.random.stateless_uniform([classes, channels], [seed, 0], 0.15, 0.85)
        images, labels = [], []
        self._offsets: dict[str, Any] = {}
        self._sizes: dict[str, Any] = {}
        for number, mode in enumerate(MODES, start=1):
            size = max(1, min(params["pool_size"], counts[mode]))
            mode_labels = tf.random.stateless_uniform([size], [seed, number], 0, classes, dtype=tf.int32)
            noise = tf.random.stateless_normal([size, height, width, channels], [seed, number], stddev=0.15)
            images.append(tf.clip_by_value(tf.gather(colours, mode_labels)[:, None, None, :] + noise, 0.0, 1.0))
            labels.append(mode_labels)
            self._offsets[mode] = sum(self._sizes.values())
            self._sizes[mode] = size
        self._images = tf.concat(images, axis=0)
        self._labels = tf.concat(labels, axis=0)

    def dataset(self, mode: str, augment: Any = None, num_shards: int = 1, shard_index: int = 0,
                seed: int | tf.Tensor | None = None, batch_size: int | None = None,
                skip: int | tf.Tensor = 0) -> tf.data.Dataset:
        """The shared pipeline's batches, made a batch at a time when nothing changes the images.

        Example numbers are sharded and shuffled as the shared pipeline does, then batched,
        and one gather per batch fetches the images: the same batches in the same order, for
        a tenth of the tf.data CPU (the per-example maps cost more than the gathers; figures in
        docs/benchmarks.md). A benchmark's input then costs what a hand-written
        `from_tensor_slices` pipeline does. With an augmenter that changes the images, the
        shared per-example pipeline runs.
        """
        if changes_data(augment):
            return super().dataset(mode, augment, num_shards, shard_index, seed, batch_size, skip)
        self._check_mode(mode)
        offset, size = self._offsets[mode], self._sizes[mode]
        numbers = self._shuffled(tf.data.Dataset.range(self.counts[mode]).shard(num_shards, shard_index),
                                 mode, num_shards, seed, shard_index)
        batch = batch_size or self.params["batch_size"]
        numbers = leave_out(numbers, skipped_examples(skip, batch))
        data = numbers.batch(batch, drop_remainder=mode == "train" and self.params["drop_remainder"])
        data = data.map(lambda batch: self._decode(offset + batch % size))
        prefetch = parallelism(self.params["prefetch"])
        return data.prefetch(prefetch) if prefetch != 0 else data

    def _raw(self, mode: str) -> tf.data.Dataset:
        offset, size = self._offsets[mode], self._sizes[mode]
        return tf.data.Dataset.range(self.counts[mode]).map(lambda i: offset + i % size)

    def _decode(self, index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.gather(self._images, index), tf.gather(self._labels, index)
