"""A confusion matrix as a picture for a person: the PNG a classifier's val phase and
`dslrun eval` write beside the metrics file and show in TensorBoard (the numbers are the
modeler's `report`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def confusion_png(matrix: np.ndarray, names: list[str] | None, path: Path, title: str) -> None:
    """The matrix as a PNG: a cell per (true, predicted) pair, shaded by its share of the true
    class's examples, its count written in it; true classes down, predicted across."""
    from PIL import Image, ImageDraw

    matrix = np.asarray(matrix, dtype=np.float64)
    labels = list(names) if names and len(names) == len(matrix) else [str(k) for k in range(len(matrix))]
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
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # a run and an `eval --watch` may draw the same file
    image.save(partial, format="PNG", compress_level=1)  # fast: a 50-class matrix is 2300 pixels wide
    os.replace(partial, path)


def png_summary(path: Path, tag: str) -> None:
    """The PNG at `path` as a TensorBoard image (in the default summary writer, at its step)."""
    import tensorflow as tf

    image = tf.io.decode_png(tf.io.read_file(str(path)), channels=3)
    tf.summary.image(tag, image[tf.newaxis])
