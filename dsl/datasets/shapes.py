"""The shapes the generated image sets draw (disc, square, triangle), for segmentation and detection.

Both tasks' generators paint the same three kinds, so a segmentation model and a detector learn
the same vocabulary of objects; one definition keeps them drawn alike.
"""

from __future__ import annotations

import numpy as np


def inside(kind: str, dx: np.ndarray, dy: np.ndarray, radius: float) -> np.ndarray:
    """Boolean mask of the pixels inside a `kind` of `radius` whose centre is at offsets (0, 0):
    `dx`, `dy` are each pixel's offsets from the centre."""
    if kind == "disc":
        return np.asarray(dx * dx + dy * dy <= radius * radius)
    if kind == "square":
        half = radius * 0.85
        return np.asarray((np.abs(dx) <= half) & (np.abs(dy) <= half))
    # A triangle pointing up: apex at (cx, cy - radius), base of width 2*radius at cy + radius.
    return np.asarray((dy >= -radius) & (dy <= radius) & (np.abs(dx) <= (dy + radius) / 2))
