"""Anchors of a single-stage detector: boxes at every position of every pyramid level.

Pure Python (the side lengths, for `dslrun validate`); the grid itself is built with numpy
inside `anchor_boxes`. The network and the modeler both derive the anchors from the
network's `anchors` section and the inputter's image shape, so they cannot disagree.

Level l has stride 2**l: its feature map is ceil(H / 2**l) x ceil(W / 2**l), one anchor
set centred on every cell. Each set holds len(scales) x len(ratios) anchors of area
(size x scale)^2 and height / width = ratio. Anchors are ordered by level, row, column,
then scale and ratio, the order in which the heads' outputs are flattened.
"""

from __future__ import annotations

import math
from typing import Any

ANCHORS_PARAM: dict[str, Any] = {
    "description": "The anchor boxes every feature-pyramid position predicts from.",
    "type": "object",
    "properties": {
        "levels": {
            "description": "Pyramid levels the heads run on; level l has stride 2**l (3 = 1/8 of the image).",
            "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 7},
            "minItems": 1, "uniqueItems": True, "default": [3, 4, 5],
        },
        "sizes": {
            "description": "Anchor side in pixels of the fed image at each level, one per level (RetinaNet: 4 x stride).",
            "type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 1, "default": [32, 64, 128],
        },
        "scales": {
            "description": "Multipliers of each level's size (RetinaNet: 2**0, 2**(1/3), 2**(2/3)).",
            "type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 1,
            "default": [1.0, 1.26, 1.587],
        },
        "ratios": {
            "description": "Aspect ratios height / width of the anchors at every position.",
            "type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 1,
            "default": [0.5, 1.0, 2.0],
        },
    },
    "additionalProperties": False,
    "default": {"levels": [3, 4, 5], "sizes": [32, 64, 128], "scales": [1.0, 1.26, 1.587], "ratios": [0.5, 1.0, 2.0]},
}


def anchors_of(network: dict[str, Any]) -> dict[str, Any]:
    """The network section's `anchors`, defaults filled."""
    return {**ANCHORS_PARAM["default"], **(network.get("anchors") or {})}


def anchors_per_position(anchors: dict[str, Any]) -> int:
    return len(anchors["scales"]) * len(anchors["ratios"])


def anchor_sides(network: dict[str, Any]) -> list[float]:
    """The side (sqrt of the area) of every anchor shape of a detection network section; [] for another network."""
    if "anchors" not in network:
        return []
    anchors = anchors_of(network)
    return [size * scale for size in anchors["sizes"] for scale in anchors["scales"]]


def anchor_boxes(anchors: dict[str, Any], image_shape: tuple[int, ...]) -> Any:
    """float32 (A, 4): every anchor as [y_min, x_min, y_max, x_max], normalised to the image."""
    import numpy as np

    height, width = int(image_shape[0]), int(image_shape[1])
    # (height, width) of each anchor shape per unit of the level's size.
    shapes = np.asarray([(scale * math.sqrt(ratio), scale / math.sqrt(ratio))
                         for scale in anchors["scales"] for ratio in anchors["ratios"]], np.float64)
    found = []
    for level, size in zip(anchors["levels"], anchors["sizes"]):
        stride = 2 ** level
        rows, cols = math.ceil(height / stride), math.ceil(width / stride)
        cy, cx = np.meshgrid((np.arange(rows) + 0.5) * stride, (np.arange(cols) + 0.5) * stride, indexing="ij")
        half_h, half_w = shapes[:, 0] * size / 2, shapes[:, 1] * size / 2
        centres = np.stack([cy.ravel(), cx.ravel()], axis=-1)[:, None, :]
        boxes = np.concatenate([centres[..., :1] - half_h[None, :, None], centres[..., 1:] - half_w[None, :, None],
                                centres[..., :1] + half_h[None, :, None], centres[..., 1:] + half_w[None, :, None]],
                               axis=-1)
        found.append(boxes.reshape(-1, 4) / np.asarray([height, width, height, width], np.float64))
    return np.concatenate(found).astype(np.float32)
