"""`coco_json`: images and their boxes from COCO annotation files.

`images` (id, file_name, width, height), `annotations` (image_id, category_id, bbox as
[x, y, width, height] in pixels, iscrowd) and `categories` (id, name). Categories become
the contiguous class indices 0 .. num_classes-1 in the order of their ids, and name the
classes unless `classes` does; `iscrowd` annotations are left out of training and
scoring. `file_name` is relative to `image_dir` (default: the JSON file's folder). A bad
annotation is an error naming the file and the annotation id.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import source_params
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.tasks.object_detection._box_inputters import box_inputter, box_inputter_built
from dsl.tasks.object_detection._box_listing import detection_params

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a COCO annotations JSON file", {"type": "string", "minLength": 1}),
    "image_dir": {
        "description": "Folder the images' file_name are relative to; null = each JSON file's own folder.",
        "type": ["string", "null"],
        "default": None,
    },
    **detection_params(),
}


@register("inputter", "coco_json", params=PARAMS, **box_inputter("coco"))
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Images and boxes from COCO annotation JSON files (bbox [x, y, w, h]; categories -> class indices).

    Read every declared JSON now (errors name the file and annotation id); pixels are read while training.
    """
    return box_inputter_built(params, "coco")
