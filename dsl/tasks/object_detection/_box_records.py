"""What `dslrun predict` writes for a detection input: a record of its boxes, and an overlay.

Boxes come out of the network normalised to the fed image; the record gives them in pixels
of the input file (x_min, y_min, x_max, y_max), the CSV inputter's convention. The overlay
draws each box and its class name and score on the input image, one colour per class, enlarged
when the image is small.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from dsl.modelers.mask_records import _original, _unused, palette

OVERLAY_SIDE = 384  # the overlay of a smaller image is enlarged by a whole factor towards this side


def box_record(source: dict[str, Any], predictions: dict[str, Any], features: np.ndarray,
               class_names: list[str] | None, options: dict[str, Any]) -> dict[str, Any]:
    picture = _original(source, features)
    width, height = picture.size
    count = int(np.asarray(predictions["num_detections"]).reshape(-1)[0])
    boxes = np.asarray(predictions["detection_boxes"])[0][:count]
    scores = np.asarray(predictions["detection_scores"])[0][:count]
    classes = np.asarray(predictions["detection_classes"])[0][:count]
    threshold = float(options.get("threshold") or 0.0)
    detections = []
    for box, score, label in zip(boxes, scores, classes):
        if float(score) < threshold:
            continue  # below what a reader asked to see (`dslrun predict --threshold`)
        y0, x0, y1, x1 = (float(v) for v in box)
        name = class_names[int(label)] if class_names and int(label) < len(class_names) else str(int(label))
        detections.append({"class": name, "label": int(label), "score": round(float(score), 6),
                           "box": [round(x0 * width, 2), round(y0 * height, 2), round(x1 * width, 2), round(y1 * height, 2)]})
    record: dict[str, Any] = {**source, "size": [height, width], "threshold": threshold, "detections": detections}
    if not detections and len(scores):
        # A young detector's scores stay low (focal loss): say what a lower threshold would show.
        record["highest_score"] = round(float(scores.max()), 6)
        if not options.get("said_threshold"):
            options["said_threshold"] = True
            print(f"dslrun: predict: no detection of {source.get('image', 'an input')} scores --threshold {threshold:g} "
                  f"or more (its best: {float(scores.max()):.2f}); a lower --threshold shows the boxes below it",
                  file=sys.stderr, flush=True)
    if options.get("overlay"):
        record["overlay"] = _overlay(picture, detections, source, options)
    return record


def _overlay(picture: Any, detections: list[dict[str, Any]], source: dict[str, Any], options: dict[str, Any]) -> str:
    from PIL import ImageDraw

    folder = Path(options["out"])
    folder.mkdir(parents=True, exist_ok=True)
    stem = _unused(Path(str(source.get("image", "input"))).stem, options.setdefault("taken", set()))
    colours = palette(max([d["label"] for d in detections], default=0) + 2)[1:]
    # A small image (96 px) is drawn enlarged, whole pixels to a side, so that the labels can be read.
    scale = max(1, OVERLAY_SIDE // max(picture.size))
    picture = picture.resize((picture.size[0] * scale, picture.size[1] * scale), resample=0)  # 0: nearest
    draw = ImageDraw.Draw(picture)
    for detection in detections:
        colour = tuple(int(c) for c in colours[detection["label"]])
        box = [value * scale for value in detection["box"]]
        draw.rectangle(box, outline=colour, width=2)
        draw.text((box[0] + 2, box[1] + 1), f"{detection['class']} {detection['score']:.2f}", fill=colour)
    path = folder / f"{stem}_overlay.png"
    picture.save(path, format="PNG")
    return str(path)
