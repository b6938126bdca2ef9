"""A small detection set a tiny RetinaNet learns in a minute: a few shapes per image on noise, with boxes.

Each image holds 1 to `max_objects` shapes (disc, square, triangle, in turn per class) of
random sizes and positions, placed so that two boxes overlap little (IoU <= 0.2), each in
its class's tint with pixel noise on top, on a dim textured background. A box is the
tight pixel extent of its shape. An untrained detector scores an mAP@0.5 near 0; a small
one that sees colour and shape gets well above.

On disk, both layouts the detection inputters read, sharing the images:

    DIR/train/images/00000.png ...        DIR/eval/images/00000.png ...
    DIR/train.csv, DIR/eval.csv           `image_path,x_min,y_min,x_max,y_max,label` rows, one per box,
                                          paths relative to the CSV, labels class names
    DIR/train.json, DIR/eval.json         COCO annotations (`file_name` relative to the JSON's folder)
    DIR/classes.txt, DIR/dataset.json     class names; what was generated (dsl/datasets/layout.py)
"""

from __future__ import annotations

import colorsys
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsl.datasets import layout, shapes
from dsl.tasks.object_detection._box_listing import box_iou

SHAPES = ("disc", "square", "triangle")
HEADER = ("image_path", "x_min", "y_min", "x_max", "y_max", "label")
MAX_OVERLAP = 0.2  # IoU above which a new shape is placed elsewhere

# One image's boxes: (x_min, y_min, x_max, y_max, class index), pixel coordinates.
Box = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class DetectionSpec(layout.SetSpec):
    """What to generate (dsl.datasets.layout.SetSpec), the images' height and width, and the
    shapes an image holds at most."""

    image_size: int = 64
    max_objects: int = 3


def class_names(num_classes: int) -> list[str]:
    """`disc`, `square`, `triangle`, then numbered repeats: `disc_3`, `square_4`..."""
    return [SHAPES[k] if k < len(SHAPES) else f"{SHAPES[k % len(SHAPES)]}_{k}" for k in range(num_classes)]


def generate(count: int, spec: DetectionSpec, stream: int) -> tuple[np.ndarray, list[list[Box]]]:
    """`count` uint8 images (count, S, S, 3) and the boxes of each; `stream` separates train from val."""
    rng = np.random.default_rng([spec.seed, stream])
    size = spec.image_size
    coords = np.arange(size, dtype=np.float32) + 0.5
    ys, xs = np.meshgrid(coords, coords, indexing="ij")
    images = np.empty((count, size, size, 3), np.float32)
    boxes: list[list[Box]] = []
    for index in range(count):
        grey = rng.uniform(0.15, 0.4)
        image = grey + rng.uniform(-0.05, 0.05, 3) + rng.normal(0.0, 0.06, (size, size, 3))
        found: list[Box] = []
        for _ in range(int(rng.integers(1, spec.max_objects + 1))):
            label = int(rng.integers(0, spec.num_classes))
            inside = _placed(SHAPES[label % len(SHAPES)], xs, ys, size, rng, found)
            if inside is None:
                continue
            image[inside] = _tint(label, spec.num_classes, rng) + rng.normal(0.0, 0.06, (int(inside.sum()), 3))
            rows, cols = np.nonzero(inside)
            found.append((int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1, label))
        images[index] = image
        boxes.append(found)
    return (np.clip(images, 0.0, 1.0) * 255).round().astype(np.uint8), boxes


def write(out: Path, spec: DetectionSpec, force: bool = False) -> tuple[bool, dict[str, int]]:
    """Generate the set into `out` unless it is already there; returns (written, counts per split).

    Each split is listed twice: a CSV of one row per box, and COCO JSON (train.json, eval.json)."""
    names = class_names(spec.num_classes)

    def split(name: str, count: int, stream: int) -> list[tuple[Any, ...]]:
        images, boxes = generate(count, spec, stream)
        paths = layout.write_images(out, f"{name}/images", images)
        layout.atomic_text(out / f"{name}.json", json.dumps(coco(paths, boxes, names, spec.image_size)) + "\n")
        return [(path, *box[:4], names[box[4]]) for path, found in zip(paths, boxes) for box in found]

    return layout.write_set(out, "synthetic-detection", spec, force, split, names, header=HEADER,
                            also=("train.json", "eval.json"))


def coco(paths: list[str], boxes: list[list[Box]], names: list[str], size: int) -> dict[str, Any]:
    """The COCO annotations of one split: category ids 1..K, bbox [x, y, width, height]."""
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for image_id, (path, found) in enumerate(zip(paths, boxes), start=1):
        images.append({"id": image_id, "file_name": path, "width": size, "height": size})
        for x_min, y_min, x_max, y_max, label in found:
            width, height = x_max - x_min, y_max - y_min
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": label + 1,
                                "bbox": [x_min, y_min, width, height], "area": width * height, "iscrowd": 0})
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(names)]
    return {"images": images, "annotations": annotations, "categories": categories}


def _placed(kind: str, xs: np.ndarray, ys: np.ndarray, size: int, rng: np.random.Generator,
            found: list[Box]) -> np.ndarray | None:
    """The pixels of one shape overlapping the boxes `found` little, or None after a few tries."""
    for _ in range(20):
        radius = rng.uniform(size / 10, size / 4)
        cx, cy = rng.uniform(radius, size - radius, 2)
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        if all(box_iou(box, other[:4]) <= MAX_OVERLAP for other in found):
            return shapes.inside(kind, xs - cx, ys - cy, radius)
    return None




def _tint(label: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    hue = label / max(1, num_classes) + rng.uniform(-0.03, 0.03)
    return np.array(colorsys.hsv_to_rgb(hue % 1.0, 0.8, 0.95), dtype=np.float32)
