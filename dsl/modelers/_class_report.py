"""Per-class results of a classifier from one confusion matrix: precision, recall, F1, support.

Private and TensorFlow-importing. `ConfusionF1` is the val metric `macro_f1` (the mean F1 of
the classes that occur); its state is the confusion matrix it sums batch by batch (rows the
true class, columns the predicted one). Counts are sums, so N ranks' matrices add up to
exactly the matrix of one process; every per-class number is computed from the whole
matrix once, never averaged from per-batch or per-rank scores (MMEngine's evaluator idea).

`class_report` turns a matrix into the per-class table `dslrun eval` prints, and
`confusion_png` draws it (counts in cells, class names on the axes) for a person to read.
"""

from __future__ import annotations

from pathlib import Path
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
        self.total_cm.assign_add(tf.math.confusion_matrix(labels, predicted, self.num_classes, dtype=tf.float64))

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


def class_labels(num_classes: int, names: list[str] | None) -> list[str]:
    """The classes' names when there is one per class, else their indices as text."""
    return list(names) if names and len(names) == num_classes else [str(k) for k in range(num_classes)]


def confusion_png(matrix: np.ndarray, names: list[str] | None, path: Path, title: str) -> None:
    """The matrix as a PNG: a cell per (true, predicted) pair, shaded by its share of the true
    class's examples, its count written in it; true classes down, predicted across."""
    from PIL import Image, ImageDraw

    matrix = np.asarray(matrix, dtype=np.float64)
    labels = class_labels(len(matrix), names)
    cell, margin = 44, 12 + 7 * max(len(label) for label in labels)
    top = 40  # the title, then the predicted classes' names
    size = (max(margin + cell * len(matrix) + 10, 260), top + cell * len(matrix) + 10)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.text((6, 4), f"{title}: rows true, columns predicted", fill="black")
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    for row in range(len(matrix)):
        draw.text((6, top + row * cell + cell // 2 - 5), labels[row], fill="black")
        draw.text((margin + row * cell + 4, top - 14), labels[row][: cell // 7], fill="black")
        for column in range(len(matrix)):
            shade = int(255 * (1 - shares[row, column]))
            box = (margin + column * cell, top + row * cell, margin + (column + 1) * cell - 1, top + (row + 1) * cell - 1)
            draw.rectangle(box, fill=(shade, shade, 255), outline="grey")
            draw.text((box[0] + 6, box[1] + cell // 2 - 5), str(int(matrix[row, column])),
                      fill="white" if shade < 110 else "black")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def png_summary(path: Path, tag: str, step: int) -> None:
    """The PNG at `path` as a TensorBoard image (in the summary writer that is the default)."""
    image = tf.io.decode_png(tf.io.read_file(str(path)), channels=3)
    tf.summary.image(tag, image[tf.newaxis], step=step)
