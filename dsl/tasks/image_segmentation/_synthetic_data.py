"""A small segmentation set a U-Net learns in a minute: coloured shapes on a noisy background.

Class 0 is the background, a dim low-saturation texture; class k >= 1 is one shape kind
(disc, square, triangle, in turn) in its own tint (hue (k-1)/(K-1), jittered a little),
with pixel noise on top. Each image holds 1 to 3 shapes of random classes, sizes and
positions; a later shape covers an earlier one, and the mask says which class each pixel
shows. Predicting background everywhere scores a mean IoU of about 1/K (the background's
IoU is about 0.8, every other class 0); a small network that sees colour and shape reaches
far above that.

On disk (the CamVid layout of the Lambda demo, dsl/datasets/layout.py):

    DIR/train/images/00000.png  RGB image          DIR/train/masks/00000.png  8-bit class indices
    DIR/train.csv, DIR/eval.csv  `image_path,mask_path` rows, paths relative to the CSV
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsl.datasets import layout, shapes

SHAPES = ("disc", "square", "triangle")
HEADER = ("image_path", "mask_path")


@dataclass(frozen=True)
class SegmentationSpec(layout.SetSpec):
    """What to generate (dsl.datasets.layout.SetSpec) and the images' height and width."""

    image_size: int = 64


def class_names(num_classes: int) -> list[str]:
    """`background`, then each class's shape and number: `disc_1`, `square_2`, `triangle_3`, `disc_4`..."""
    return ["background", *(f"{SHAPES[(k - 1) % len(SHAPES)]}_{k}" for k in range(1, num_classes))]


def generate(count: int, spec: SegmentationSpec, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` uint8 images (count, S, S, 3) and uint8 masks (count, S, S); `stream` separates train from val."""
    rng = np.random.default_rng([spec.seed, stream])
    size = spec.image_size
    coords = np.arange(size, dtype=np.float32) + 0.5
    ys, xs = np.meshgrid(coords, coords, indexing="ij")
    images = np.empty((count, size, size, 3), np.float32)
    masks = np.zeros((count, size, size), np.uint8)
    for index in range(count):
        grey = rng.uniform(0.25, 0.55)
        image = grey + rng.uniform(-0.05, 0.05, 3) + rng.normal(0.0, 0.07, (size, size, 3))
        for _ in range(rng.integers(1, 4)):
            label = int(rng.integers(1, spec.num_classes))
            inside = _shape(SHAPES[(label - 1) % len(SHAPES)], xs, ys, size, rng)
            image[inside] = _tint(label, spec.num_classes, rng) + rng.normal(0.0, 0.07, (int(inside.sum()), 3))
            masks[index][inside] = label
        images[index] = image
    return (np.clip(images, 0.0, 1.0) * 255).round().astype(np.uint8), masks


def write(out: Path, spec: SegmentationSpec, force: bool = False) -> tuple[bool, dict[str, int]]:
    """Generate the set into `out` unless it is already there; returns (written, counts per split)."""

    def split(name: str, count: int, stream: int) -> list[tuple[str, str]]:
        images, masks = generate(count, spec, stream)
        return list(zip(layout.write_images(out, f"{name}/images", images),
                        layout.write_images(out, f"{name}/masks", masks[..., None])))

    return layout.write_set(out, "synthetic-segmentation", spec, force, split, class_names(spec.num_classes),
                            header=HEADER)


def _shape(kind: str, xs: np.ndarray, ys: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """The pixels inside one shape of `kind`, of random size and position (boolean (S, S))."""
    radius = rng.uniform(size / 9, size / 4)
    cx, cy = rng.uniform(radius * 0.5, size - radius * 0.5, 2)
    return shapes.inside(kind, xs - cx, ys - cy, radius)


def _tint(label: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    hue = (label - 1) / max(1, num_classes - 1) + rng.uniform(-0.03, 0.03)
    return np.array(colorsys.hsv_to_rgb(hue % 1.0, 0.8, 0.9), dtype=np.float32)
