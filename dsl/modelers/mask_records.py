"""What `dslrun predict` writes for a segmentation input: a mask PNG, an overlay, and a record.

The mask is predicted at the pipeline's image shape and written at the input file's own
size (nearest neighbour, so a pixel keeps a class index) as an 8-bit single-channel PNG of
class indices, the format the segmentation inputter reads. The overlay blends the input
image with a fixed colour per class (the PASCAL VOC palette: class 0 black, then red,
green, yellow, blue...), the same colours for every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

OVERLAY_ALPHA = 0.5


def palette(num_classes: int) -> np.ndarray:
    """uint8 (num_classes, 3): the PASCAL VOC colour map (bits of the class index spread over R, G, B)."""
    colours = np.zeros((num_classes, 3), np.uint8)
    for k in range(num_classes):
        label, red, green, blue = k, 0, 0, 0
        for shift in range(7, -1, -1):
            red |= (label & 1) << shift
            green |= ((label >> 1) & 1) << shift
            blue |= ((label >> 2) & 1) << shift
            label >>= 3
        colours[k] = (red, green, blue)
    return colours


def mask_record(source: dict[str, Any], mask: np.ndarray, features: np.ndarray, num_classes: int, out: str,
                overlay: bool, class_names: list[str] | None = None, taken: set[str] | None = None,
                color: bool = False) -> dict[str, Any]:
    """Write `mask` (H, W) for the input `source['image']` under `out`; its record (paths, size, class shares).
    With `color`, also `<stem>_color.png`: a palette PNG whose pixels are the class indices and whose
    palette is the overlay's colours, so any image viewer shows the classes apart.

    Files are named after the input's stem; `taken` holds the stems this predict run used
    already, so two inputs of one name (a/0.png, b/0.png) get 0.png and 0-2.png, not one file.
    """
    from PIL import Image

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = _unused(Path(str(source.get("image", "input"))).stem, taken if taken is not None else set())
    picture = _original(source, features)
    written = Image.fromarray(mask.astype(np.uint8), mode="L").resize(picture.size, Image.Resampling.NEAREST)
    mask_path = folder / f"{stem}.png"
    written.save(mask_path, format="PNG")
    record: dict[str, Any] = {**source, "mask": str(mask_path), "size": [picture.height, picture.width]}
    if overlay:
        colours = palette(num_classes)[np.asarray(written)]
        blended = (1 - OVERLAY_ALPHA) * np.asarray(picture, np.float32) + OVERLAY_ALPHA * colours
        overlay_path = folder / f"{stem}_overlay.png"
        Image.fromarray(blended.round().astype(np.uint8), mode="RGB").save(overlay_path, format="PNG")
        record["overlay"] = str(overlay_path)
    if color:
        color_path = folder / f"{stem}_color.png"
        _as_palette(written).save(color_path, format="PNG")
        record["color"] = str(color_path)
    counts = np.bincount(np.asarray(written).ravel(), minlength=num_classes)
    names = class_names if class_names and len(class_names) == num_classes else [str(k) for k in range(num_classes)]
    record["classes"] = {name: round(float(count) / counts.sum(), 6) for name, count in zip(names, counts)}
    return record


def _as_palette(mask: Any) -> Any:
    """An 8-bit class-index image as a palette image of the same indices, VOC colours."""
    from PIL import Image

    image = Image.fromarray(np.asarray(mask, np.uint8), mode="P")
    image.putpalette(palette(256).ravel().tolist())
    return image


def _unused(stem: str, taken: set[str]) -> str:
    name, number = stem, 1
    while name in taken:
        number += 1
        name = f"{stem}-{number}"
    taken.add(name)
    return name


def _original(source: dict[str, Any], features: np.ndarray) -> Any:
    """The input image as RGB at its own size, or the decoded features when the file cannot be read."""
    from PIL import Image

    try:
        with Image.open(str(source["image"])) as image:
            return image.convert("RGB")
    except (KeyError, OSError, ValueError):
        pixels = (np.clip(features, 0.0, 1.0) * 255).round().astype(np.uint8)
        return Image.fromarray(np.repeat(pixels, 3, axis=-1) if pixels.shape[-1] == 1 else pixels, mode="RGB")
