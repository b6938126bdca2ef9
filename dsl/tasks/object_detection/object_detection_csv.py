"""`object_detection_csv`: images and their boxes, listed in CSV files of one row per box.

    image_path,x_min,y_min,x_max,y_max,label
    images/0001.png,12,30,57,88,cat
    images/0002.png,,,,,                      an image without boxes

Coordinates are pixels of the image file, paths relative to the CSV's folder, `label` a
class index or a name of `classes`. A first row of words is a header, read by its names (in any
order, `xmin`, `filename`, `class` and the like too; dsl/tasks/object_detection/_box_listing.py). The rows of one image need not be adjacent. Every row
is checked when the pipeline is built (dsl/tasks/object_detection/_box_listing.py): a box with
min >= max, reaching outside its image, or with an unknown label is an error naming the
CSV file and line. A batch holds each image's boxes padded to `max_boxes`, with their
count (dsl/tasks/object_detection/_inputter.py).
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
    **source_params("a CSV file of `image_path,x_min,y_min,x_max,y_max,label` rows", {"type": "string", "minLength": 1}),
    **detection_params(),
}


@register("inputter", "object_detection_csv", params=PARAMS, **box_inputter("csv"))
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Images and boxes listed in CSV files of `image_path,x_min,y_min,x_max,y_max,label` rows (one per box).

    Read every declared CSV now (errors name the file and line); pixels are read while training.
    """
    return box_inputter_built(params, "csv")
