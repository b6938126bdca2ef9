"""Segmentation metrics from one confusion matrix: mean IoU, pixel accuracy, IoU per class.

Private and TensorFlow-importing. `mean_iou` is Keras's MeanIoU (its confusion matrix
ignores `ignore_label`, argmax of the logits as the prediction); the other metrics are
views of that matrix, so one update per batch serves them all: a view's `update_state`
does nothing and its `reset_state` leaves the matrix to its owner, which the loop resets
with every other metric.

IoU of a class is TP / (TP + FP + FN) over every pixel the metric has seen; a class that
appears neither in the targets nor the predictions has no IoU: `mean_iou` leaves it out
(Keras's convention) and its `iou_<k>` reads 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


class ConfusionView(tf.keras.metrics.Metric):
    """A value of another metric's confusion matrix (B, pred) -> scalar, updated by that metric."""

    def __init__(self, matrix: Callable[[], tf.Tensor], value: Callable[[tf.Tensor], tf.Tensor], name: str) -> None:
        super().__init__(name=name)
        self._matrix = matrix
        self._value = value

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the metric owning the matrix counts the batch."""
        del args, kwargs

    def result(self) -> tf.Tensor:
        return tf.cast(self._value(tf.cast(self._matrix(), tf.float64)), tf.float32)

    def reset_state(self) -> None:
        """Nothing: the owner of the matrix resets it."""
        return


def segmentation_metrics(num_classes: int, ignore_label: int | None,
                         per_class: list[str] | None = None) -> dict[str, tf.keras.metrics.Metric]:
    """{'mean_iou', 'pixel_accuracy', then each class's IoU named by `per_class` (default 'iou_0' ..
    'iou_<K-1>')}, updated with (masks, logits)."""
    mean_iou = tf.keras.metrics.MeanIoU(num_classes, name="mean_iou", ignore_class=ignore_label, sparse_y_pred=False)

    def matrix() -> tf.Tensor:
        return mean_iou.total_cm

    metrics: dict[str, tf.keras.metrics.Metric] = {
        "mean_iou": mean_iou,
        "pixel_accuracy": ConfusionView(matrix, pixel_accuracy, "pixel_accuracy"),
    }
    for k, name in enumerate(per_class or [f"iou_{k}" for k in range(num_classes)]):
        metrics[name] = ConfusionView(matrix, _class_iou_of(k), name)
    return metrics


def _class_iou_of(k: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """The IoU of class `k`, from a confusion matrix."""
    return lambda confusion: class_iou(confusion)[k]


def pixel_accuracy(confusion: tf.Tensor) -> tf.Tensor:
    """Share of the counted pixels whose predicted class is their true class."""
    return tf.math.divide_no_nan(tf.linalg.trace(confusion), tf.reduce_sum(confusion))


def class_iou(confusion: tf.Tensor) -> tf.Tensor:
    """IoU of each class, 0 where the class is in neither the targets nor the predictions."""
    true_positives = tf.linalg.diag_part(confusion)
    union = tf.reduce_sum(confusion, axis=0) + tf.reduce_sum(confusion, axis=1) - true_positives
    return tf.math.divide_no_nan(true_positives, union)
