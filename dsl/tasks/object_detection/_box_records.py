"""What `dslrun predict` writes for a detection input: a record of its boxes, and an overlay.

Boxes come out of the network normalised to the fed image; the record gives them in pixels
of the input file (x_min, y_min, x_max, y_max), the CSV inputter's convention. The overlay
draws each box and its class name and score (on a patch of the box's colour) on the input image,
one bright colour per class, enlarged when the image is small.

The model's non-maximum suppression is per class (mAP wants it so), so one object can carry a box
of every class it resembles; a reader wants one answer per object. Unless `--all-classes` is
given, a box overlapping a better-scoring box of another class (IoU of at least the modeler's
`nms_iou`) is left out of the record and the drawing, and the record counts it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from dsl.modelers.mask_records import _original, _unused
from dsl.tasks.object_detection._box_listing import box_iou

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
    hidden = 0
    if not options.get("all_classes"):
        kept = one_per_object(detections, float(options.get("nms_iou", 0.5)))
        hidden, detections = len(detections) - len(kept), kept
    record: dict[str, Any] = {**source, "size": [height, width], "threshold": threshold, "detections": detections}
    if hidden:
        record["overlapping_hidden"] = hidden  # boxes of other classes on the same objects (--all-classes shows them)
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


def one_per_object(detections: list[dict[str, Any]], iou: float) -> list[dict[str, Any]]:
    """The detections, best score first, without any box whose IoU with a better kept one (of any
    class) reaches `iou`: class-agnostic suppression over the model's per-class result."""
    kept: list[dict[str, Any]] = []
    for detection in sorted(detections, key=lambda d: -d["score"]):
        if all(box_iou(detection["box"], other["box"]) < iou for other in kept):
            kept.append(detection)
    return kept


def _overlay(picture: Any, detections: list[dict[str, Any]], source: dict[str, Any], options: dict[str, Any]) -> str:
    from PIL import ImageDraw

    folder = Path(options["out"])
    folder.mkdir(parents=True, exist_ok=True)
    stem = _unused(Path(str(source.get("image", "input"))).stem, options.setdefault("taken", set()))
    # A small image (96 px) is drawn enlarged, whole pixels to a side, so that the labels can be read.
    scale = max(1, OVERLAY_SIDE // max(picture.size))
    picture = picture.resize((picture.size[0] * scale, picture.size[1] * scale), resample=0)  # 0: nearest
    draw = ImageDraw.Draw(picture)
    font = _font(max(11, min(picture.size) // 24))
    for detection in detections:
        colour = box_colour(detection["label"])
        box = [value * scale for value in detection["box"]]
        draw.rectangle(box, outline=colour, width=max(2, scale // 2))
        # The label on a patch of the box's colour, above the box where it fits: readable on any
        # background (the VOC palette's navy text vanished on dark images).
        text = f"{detection['class']} {detection['score']:.2f}"
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        height = bottom - top + 4
        y = box[1] - height if box[1] >= height else box[1]
        draw.rectangle([box[0], y, box[0] + right - left + 4, y + height], fill=colour)
        draw.text((box[0] + 2 - left, y + 2 - top), text, fill=_ink(colour), font=font)
    path = folder / f"{stem}_overlay.png"
    picture.save(path, format="PNG")
    return str(path)


def box_colour(label: int) -> tuple[int, int, int]:
    """A bright colour per class, the same in every run: hues a golden angle apart, so that
    neighbouring class indices differ, at full value, so that boxes show on dark images."""
    import colorsys

    red, green, blue = colorsys.hsv_to_rgb((label * 0.618033988749895) % 1.0, 0.85, 1.0)
    return int(red * 255), int(green * 255), int(blue * 255)


def _ink(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on a light patch, white on a dark one (relative luminance, ITU-R BT.709)."""
    luminance = 0.2126 * colour[0] + 0.7152 * colour[1] + 0.0722 * colour[2]
    return (0, 0, 0) if luminance > 140 else (255, 255, 255)


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1: a scalable font
    except TypeError:
        return ImageFont.load_default()
