"""What each section's builder returns: the contracts between components and the loop.

`build(params, context)` of each kind returns an object of the protocol below. The loop
only talks to these methods, so any component that honours them works on every backend.
Tensor types are written as strings: this module never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

MODES = ("train", "val", "test")


class Augmenter(Protocol):
    """Per-example image transforms, run inside the inputter's parallel `map`.

    Images arrive as float32 in [0, 1], shape (H, W, C); both methods return float32 of the
    same shape.
    """

    def train(self, image: tf.Tensor) -> tf.Tensor:  # noqa: F821
        """Random augmentation plus normalisation, for the train mode."""

    def eval(self, image: tf.Tensor) -> tf.Tensor:  # noqa: F821
        """Deterministic normalisation only, for val/test/infer."""


class Inputter(Protocol):
    """Reads a data set and makes batched `tf.data` pipelines for each workflow mode."""

    image_shape: tuple[int, int, int]
    num_classes: int

    def has_source(self, mode: str) -> bool:
        """Whether the pipeline declares data for `mode` ('train', 'val' or 'test')."""

    def num_examples(self, mode: str) -> int | None:
        """Examples in `mode`'s data (None when it cannot be known cheaply)."""

    def dataset(
        self,
        mode: str,
        augment: Callable[[tf.Tensor], tf.Tensor] | None = None,  # noqa: F821
        num_shards: int = 1,
        shard_index: int = 0,
        seed: int | None = None,
    ) -> tf.data.Dataset:  # noqa: F821
        """Batches of (images float32 (B, H, W, C), labels int32 (B,)) for `mode`.

        Sharding is applied to the list of examples before shuffling, so each rank sees a
        disjoint part of the data. Train data is shuffled (by `seed`) and not repeated: the
        loop asks for a new epoch. `augment` is mapped per example with AUTOTUNE.
        """

    def decode_file(self, path: str) -> tf.Tensor:  # noqa: F821
        """One image file as float32 (H, W, C) in [0, 1], resized to `image_shape` (predict)."""


class Modeler(Protocol):
    """Loss, optimizer, learning-rate schedule and metrics (TF Model Garden's Task)."""

    def learning_rate(self, steps_per_epoch: int, scale: float = 1.0) -> Any:
        """A float or `tf.keras.optimizers.schedules.LearningRateSchedule` of the global step.

        `scale` multiplies the base rate (backends use it for lr scaling by world size).
        """

    def optimizer(self, steps_per_epoch: int, scale: float = 1.0) -> tf.keras.optimizers.Optimizer:  # noqa: F821
        """A fresh Keras optimizer using `learning_rate(steps_per_epoch, scale)`."""

    def loss(self, labels: tf.Tensor, logits: tf.Tensor, model: tf.keras.Model) -> dict[str, tf.Tensor]:  # noqa: F821
        """{'loss': total to minimise, 'cross_entropy': ..., 'l2_loss': ...} (scalars)."""

    def metrics(self, mode: str) -> dict[str, tf.keras.metrics.Metric]:  # noqa: F821
        """Fresh stateful metrics for `mode`, updated with `update_state(labels, logits)`."""

    def predictions(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:  # noqa: F821
        """{'classes': int (B,), 'probabilities': float (B, num_classes)} for infer."""
