"""Object detection: an image in, boxes with classes out (box CSV or COCO JSON; a single-stage RetinaNet).

What the task declares to the language: its targets, boxes (`max_boxes` rows of [y_min, x_min,
y_max, x_max], their classes and a count: see _inputter.py), and the facts `max_boxes` (the
inputter's) and `anchors` (the network's, which the modeler encodes its targets on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl.language.facts import PartSpec, register_batch_word, register_fact


def _boxes(facts: Callable[[str], Any]) -> PartSpec:
    """Zeros of this are an image whose rows are all padding (count 0), which traces the same
    graph as one with boxes (`validate --build`)."""
    rows = facts("max_boxes") or 1
    return {"boxes": ((rows, 4), "float32"), "classes": ((rows,), "int32"), "count": ((), "int32")}


register_batch_word("boxes", "boxes", _boxes)
register_fact("max_boxes", param="max_boxes", description="boxes per image a batch holds (padded, with their count)")
register_fact("anchors", param=None, description="the anchor shapes the network predicts from (network.anchors, filled)")
register_fact("train_box_sides", param=None,
              description="the train boxes' sides in pixels of the fed image (the modeler says at the start when no anchor fits them)")
