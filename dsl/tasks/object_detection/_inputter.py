"""The detection inputters' tf.data side: an image and its boxes, padded to `max_boxes`.

Private and TensorFlow-importing (the public modules import it inside `build`). A batch is
`(images float32 (B, H, W, C) in [0, 1], targets)` with targets a dict:

    boxes    float32 (B, max_boxes, 4)  [y_min, x_min, y_max, x_max] normalised to [0, 1]
    classes  int32 (B, max_boxes)       class indices; -1 in the padding
    count    int32 (B,)                 how many of the rows are boxes

Padding to a fixed size keeps batching plain (`Dataset.batch`) for every backend; the
inputter declares `max_boxes` as a fact, and the modeler reads the count to leave the
padding out of matching and scoring. Boxes are normalised, so resizing an image to
`image_shape` leaves them as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from dsl.inputters.common import Listing
from dsl.inputters.pipeline import BaseInputter, decode_image, remember_listings, slices
from dsl.tasks.object_detection._box_listing import ImageBoxes, class_names_of


class DetectionInputter(BaseInputter):
    """Batches of images and their padded boxes; `listings` maps a mode to its images."""

    def __init__(self, params: dict[str, Any], listings: dict[str, list[ImageBoxes]],
                 class_names: list[str] | None = None) -> None:
        super().__init__(params, tuple(params["image_shape"]), params["num_classes"])
        self.max_boxes = int(params["max_boxes"])
        names = class_names_of(params) or class_names
        self.class_names = names if names is not None and len(names) == self.num_classes else None
        self.listings = listings
        from dsl.tasks.object_detection._data_check import box_sides

        # Reported as a fact (the modeler holds them against its anchors): computed once, not per facts() call.
        self.train_box_sides = box_sides(listings.get("train", []), (int(self.image_shape[0]), int(self.image_shape[1])))
        # explain_data_error names the listing line of an image that fails to decode.
        remembered = []
        for mode, images in listings.items():
            listing = Listing(f"inputter.{mode}")
            for image in images:
                if not listing.csv_files or listing.csv_files[-1][1] != image.file:
                    listing.start_csv(image.file)
                listing.add(image.path, 0, image.line)
            remembered.append(listing)
        remember_listings(remembered)

    def facts(self) -> dict[str, Any]:
        """The image shape, the classes (and their names), the boxes a batch holds per image and the
        train boxes' sides (the modeler holds them against its anchors)."""
        return {**super().facts(), "max_boxes": self.max_boxes, "train_box_sides": self.train_box_sides}

    def num_examples(self, mode: str) -> int:
        return len(self.listings.get(mode, []))

    # ------------------------------------------------------------------------ internals
    def _raw(self, mode: str) -> tf.data.Dataset:
        images = self.listings[mode]
        boxes = np.zeros((len(images), self.max_boxes, 4), np.float32)
        classes = np.full((len(images), self.max_boxes), -1, np.int32)
        counts = np.zeros((len(images),), np.int32)
        for index, image in enumerate(images):
            count = len(image.boxes)
            counts[index] = count
            if count:
                boxes[index, :count] = np.clip(np.asarray(image.boxes, np.float32), 0.0, 1.0)
                classes[index, :count] = image.labels
        return slices(([image.path for image in images], boxes, classes, counts))

    def _decode(self, path: tf.Tensor, boxes: tf.Tensor, classes: tf.Tensor,
                count: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        image = decode_image(tf.io.read_file(path), self.image_shape)
        return image, {"boxes": boxes, "classes": classes, "count": count}
