"""Per-class results of a classifier from one confusion matrix: precision, recall, F1, support.

Private and TensorFlow-importing. `ConfusionF1` is the val metric `macro_f1` (the mean F1 of
the classes that occur); its state is the confusion matrix it sums batch by batch (rows the
true class, columns the predicted one). Counts are sums, so N ranks' matrices add up to
exactly the matrix of one process; every per-class number is computed from the whole
matrix once, never averaged from per-batch or per-rank scores (MMEngine's evaluator idea).

`class_report` turns a matrix into the per-class table `dslrun eval` prints (and draws as a
PNG, dsl/commands/_confusion_png.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


class ConfusionF1(tf.keras.metrics.Metric):
    """Macro F1 over the classes that occur, from the confusion matrix it accumulates (`total_cm`)."""

    def __init__(self, num_classes: int, name: str = "macro_f1") -> None:
        super().__init__(name=name)
        self.num_classes = num_classes
        self.total_cm = self.add_weight(name="total_cm", shape=(num_classes, num_classes), initializer="zeros",
                                        dtype=tf.float64)

    def update_state(self, labels: Any, logits: Any, sample_weight: Any = None) -> None:
        del sample_weight
        labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        predicted = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int32), [-1])
        if isinstance(self.total_cm, tf.distribute.DistributedValues):
            # A strategy's on-read variable (collective, parameter server) takes dense additions only.
            self.total_cm.assign_add(tf.math.confusion_matrix(labels, predicted, self.num_classes, dtype=tf.float64))
            return
        # One count per example, scattered into the matrix: a dense per-batch matrix costs every val
        # batch num_classes**2 additions (docs/benchmarks.md, "Cost of scale: data").
        # A label outside the classes fails here as it did in confusion_matrix.
        tf.debugging.assert_less(labels, self.num_classes, message="a label is outside 0..num_classes-1")
        tf.debugging.assert_non_negative(labels, message="a label is outside 0..num_classes-1")
        pairs = tf.stack([labels, predicted], axis=1)
        self.total_cm.scatter_nd_add(pairs, tf.ones_like(labels, dtype=tf.float64))

    def result(self) -> tf.Tensor:
        matrix = self.total_cm
        hits = tf.linalg.diag_part(matrix)
        support, predicted = tf.reduce_sum(matrix, axis=1), tf.reduce_sum(matrix, axis=0)
        f1 = tf.math.divide_no_nan(2.0 * hits, support + predicted)
        occurs = tf.cast(support + predicted > 0, tf.float64)
        return tf.cast(tf.math.divide_no_nan(tf.reduce_sum(f1 * occurs), tf.reduce_sum(occurs)), tf.float32)

    def reset_state(self) -> None:
        self.total_cm.assign(tf.zeros_like(self.total_cm))


def class_report(matrix: np.ndarray, names: list[str] | None) -> dict[str, Any]:
    """{"per_class": [{class, name, precision, recall, f1, support}...], "confusion_matrix": rows = true class}."""
    matrix = np.asarray(matrix, dtype=np.float64)
    hits = np.diag(matrix)
    support, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, hits / predicted, 0.0)
        recall = np.where(support > 0, hits / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    labels = class_labels(len(matrix), names)
    rows = [{"class": k, "name": labels[k], "precision": round(float(precision[k]), 6),
             "recall": round(float(recall[k]), 6), "f1": round(float(f1[k]), 6), "support": int(support[k])}
            for k in range(len(matrix))]
    return {"per_class": rows, "confusion_matrix": [[int(v) for v in row] for row in matrix]}


# A model predicting one class for this share of the examples, though under half of them are that
# class, has collapsed (trial B14: 171 of 173 predictions 'five' ended a run without a word).
COLLAPSED_SHARE = 0.95


def collapsed_to(report: dict[str, Any]) -> tuple[str, int, int] | None:
    """(name, predictions of it, examples) of the one class (nearly) every example was predicted as,
    at least COLLAPSED_SHARE of them, when the data holds several and under half are that class."""
    matrix = np.asarray(report["confusion_matrix"])
    predicted, support = matrix.sum(axis=0), matrix.sum(axis=1)
    total = int(predicted.sum())
    top = int(np.argmax(predicted)) if total else 0
    if (support > 0).sum() < 2 or predicted[top] < COLLAPSED_SHARE * total or support[top] >= total / 2:
        return None
    return str(report["per_class"][top]["name"]), int(predicted[top]), total


def class_labels(num_classes: int, names: list[str] | None) -> list[str]:
    """The classes' names when there is one per class, else their indices as text."""
    return list(names) if names and len(names) == num_classes else [str(k) for k in range(num_classes)]
