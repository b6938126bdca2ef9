"""What the two box inputters, `object_detection_csv` and `coco_json`, share.

They differ only in how boxes are listed ("csv" or "coco", see `_box_listing.py`): the same
parameters beyond their sources, the same rules, the same `validate --data` listing, the
same inputter once the listings are read.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Inputter
from dsl.language.rules import one_per_class
from dsl.tasks.object_detection._box_listing import coco_class_names, read_sources


def box_inputter(layout: str) -> dict[str, Any]:
    """What the box inputter of listings in `layout` registers beyond its parameters."""
    def examples(params: dict[str, Any], mode: str) -> Any:
        """The images of `mode` for `dslrun validate --data`, each bad row or annotation a problem where it is written."""
        from dsl.tasks.object_detection._data_check import detection_split

        return detection_split(params, mode, layout)

    return {"required": ("num_classes",), "examples": examples, "batch": ("image", "boxes"),
            "rules": [one_per_class("classes", "class names", "inputter")]}


def box_inputter_built(params: dict[str, Any], layout: str) -> Inputter:
    """The inputter over every declared listing, read now (a bad box names its file and line or id)."""
    from dsl.tasks.object_detection._inputter import DetectionInputter

    names = coco_class_names(params) if layout == "coco" else None
    return DetectionInputter(params, read_sources(params, layout), names)
