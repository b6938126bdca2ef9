"""What `dslrun predict` prints for an input, shared by the modelers that predict one class."""

from __future__ import annotations

from typing import Any


def class_record(source: dict[str, Any], predictions: dict[str, Any], top: int | None,
                 class_names: list[str] | None = None) -> dict[str, Any]:
    """`{**source, "class": k, "probabilities": [...]}` (+ `"top"`: the `top` most probable,
    + `"name"` when the data names its classes) from a batch of one's numpy predictions."""
    probabilities = [round(float(p), 6) for p in predictions["probabilities"][0]]
    record: dict[str, Any] = {**source, "class": int(predictions["classes"][0]), "probabilities": probabilities}
    if class_names and record["class"] < len(class_names):
        record["name"] = class_names[record["class"]]
    if top:
        ranked = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])[:top]
        record["top"] = [{"class": i, "probability": probabilities[i]} for i in ranked]
    return record
