"""A small image set that a CNN or an MLP can learn, generated in seconds for the demo and tests.

Class k is a colour and an orientation: the image is a tint of hue k/K (jittered so that
neighbouring classes overlap, which keeps colour alone from being a perfect cue) crossed by
stripes at angle k*180/K degrees with a random phase and width, plus pixel noise. A small
network reaches high accuracy in a few epochs; chance is 1/K.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsl.datasets import layout


@dataclass(frozen=True)
class SyntheticSpec(layout.SetSpec):
    """What to generate (dsl.datasets.layout.SetSpec) and the images' height and width."""

    image_size: int = 32


def generate(count: int, spec: SyntheticSpec, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` uint8 images (count, S, S, 3) and their int labels; `stream` separates train from val."""
    rng = np.random.default_rng([spec.seed, stream])
    classes, size = spec.num_classes, spec.image_size
    labels = rng.permutation(np.arange(count) % classes)
    hues = (labels + rng.uniform(-0.6, 0.6, count)) / classes
    tints = np.array([colorsys.hsv_to_rgb(h % 1.0, 0.7, 0.85) for h in hues], dtype=np.float32)
    angles = np.pi * labels / classes
    coords = np.linspace(-1.0, 1.0, size, dtype=np.float32)
    ys, xs = np.meshgrid(coords, coords, indexing="ij")
    along = xs[None] * np.cos(angles)[:, None, None] + ys[None] * np.sin(angles)[:, None, None]
    frequency = rng.uniform(2.5, 4.0, count)[:, None, None] * np.pi
    phase = rng.uniform(0.0, 2 * np.pi, count)[:, None, None]
    stripes = 0.5 + 0.5 * np.sin(frequency * along + phase)  # (N, S, S) in [0, 1]
    images = tints[:, None, None, :] * (0.45 + 0.55 * stripes[..., None])
    images += rng.normal(0.0, 0.06, images.shape)
    return (np.clip(images, 0.0, 1.0) * 255).round().astype(np.uint8), labels.astype(np.int64)


def write(out: Path, spec: SyntheticSpec, force: bool = False) -> tuple[bool, dict[str, int]]:
    """Generate the set into `out` unless it is already there; returns (written, counts per split)."""

    def split(name: str, count: int, stream: int) -> list[tuple[str, int]]:
        images, labels = generate(count, spec, stream)
        return list(zip(layout.write_images(out, name, images), labels.tolist()))

    return layout.write_set(out, "synthetic", spec, force, split, [f"class_{k}" for k in range(spec.num_classes)])
