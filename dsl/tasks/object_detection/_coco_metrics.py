"""COCO mAP as a gathered metric: every image's boxes and detections kept, scored once by pycocotools.

Private and TensorFlow-importing. mAP is no function of sums, so the metric declares
`reduction_across_ranks = "gather"` (dsl.engine.metric_reduction): each rank keeps its
images' true boxes and NMS detections (`local_results()`), the backend gathers them, and
`result_from(parts)` runs COCOeval once on all of them, the same on every rank and the
same as one process evaluating every image. `result()` is `result_from([local_results()])`.

`map` (mAP@[.5:.95]) owns the records; `map_50`, `map_75` and `ap_<k>` (AP@[.5:.95] of
class k, 0 when the class has no true box) are views of its last evaluation, so they must
come after it in the metrics dict (they do: the modeler builds them so), and COCOeval runs
once per phase, not once per view. Boxes are scored in pixels of the fed image.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.tasks.object_detection._box_coding import detect

# A record: true boxes (n, 4) and classes (n,), detected boxes (d, 4), scores (d,), classes (d,).
Record = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


# Keras runs a metric's result() through AutoGraph, which converts every Python function a
# lambda written there calls: pycocotools' evaluation then ran as converted code, each operator
# dispatched through AutoGraph, 30 times slower than the train step (issue 41). Only methods,
# passed by reference to numpy_function and marked do_not_convert, run here, and as plain Python.
@tf.autograph.experimental.do_not_convert
def coco_stats(records: list[Record], num_classes: int, image_shape: tuple[int, ...]) -> np.ndarray:
    """[mAP, mAP@0.5, mAP@0.75, AP of each class] of `records`; 0 where nothing can be scored."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    stats = np.zeros(3 + num_classes, np.float64)
    scale = np.asarray([image_shape[0], image_shape[1]] * 2, np.float64)
    truth: dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": k + 1} for k in range(num_classes)]}
    detections = []
    for image_id, (boxes, classes, found, scores, labels) in enumerate(records, start=1):
        truth["images"].append({"id": image_id, "height": int(image_shape[0]), "width": int(image_shape[1])})
        for box, label in zip(np.asarray(boxes, np.float64) * scale, classes):
            y0, x0, y1, x1 = box
            truth["annotations"].append({"id": len(truth["annotations"]) + 1, "image_id": image_id,
                                         "category_id": int(label) + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                         "area": (x1 - x0) * (y1 - y0), "iscrowd": 0})
        for box, score, label in zip(np.asarray(found, np.float64) * scale, scores, labels):
            y0, x0, y1, x1 = box
            detections.append([image_id, x0, y0, x1 - x0, y1 - y0, float(score), int(label) + 1])
    if not truth["annotations"] or not detections:
        return stats
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = truth
        coco.createIndex()
        evaluation = COCOeval(coco, coco.loadRes(np.asarray(detections, np.float64)), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    stats[:3] = np.maximum(evaluation.stats[:3], 0.0)
    precision = evaluation.eval["precision"]  # (iou thresholds, recalls, classes, areas, max dets)
    for k in range(num_classes):
        values = precision[:, :, k, 0, -1]
        values = values[values > -1]
        stats[3 + k] = float(values.mean()) if values.size else 0.0
    return stats


class CocoMap(tf.keras.metrics.Metric):
    """mAP@[.5:.95] over every image seen; owns the records its views read."""

    reduction_across_ranks = "gather"

    def __init__(self, anchors: Any, params: dict[str, Any], num_classes: int, image_shape: tuple[int, ...]) -> None:
        super().__init__(name="map")
        self._anchors = anchors
        self._params = params
        self.num_classes = num_classes
        self.image_shape = tuple(image_shape)
        self.records: list[Record] = []
        self._local: tuple[int, np.ndarray] | None = None  # (records scored, their stats)
        self.last = np.zeros(3 + num_classes)  # the stats of the last result_from, read by the views

    def update_state(self, targets: Any, outputs: Any, sample_weight: Any = None) -> Any:
        found = detect(outputs, tf.constant(self._anchors), self._params)
        return tf.numpy_function(self._add, [targets["boxes"], targets["classes"], targets["count"],
                                             found["detection_boxes"], found["detection_scores"],
                                             found["detection_classes"], found["num_detections"]], tf.int64,
                                 stateful=True)

    def _add(self, boxes: np.ndarray, classes: np.ndarray, count: np.ndarray, found: np.ndarray, scores: np.ndarray,
             labels: np.ndarray, detected: np.ndarray) -> np.int64:
        for i in range(len(count)):
            n, d = int(count[i]), int(detected[i])
            self.records.append((boxes[i, :n].copy(), classes[i, :n].copy(), found[i, :d].copy(), scores[i, :d].copy(),
                                 labels[i, :d].copy()))
        return np.int64(len(self.records))

    def local_results(self) -> list[Record]:
        return list(self.records)

    def result_from(self, parts: list[list[Record]]) -> float:
        self.last = coco_stats([record for part in parts for record in part], self.num_classes, self.image_shape)
        return float(self.last[0])

    def local_stats(self) -> np.ndarray:
        """The stats of this process's records (cached until a record is added)."""
        if self._local is None or self._local[0] != len(self.records):
            self._local = (len(self.records), coco_stats(self.records, self.num_classes, self.image_shape))
        return self._local[1]

    def result(self) -> tf.Tensor:
        return tf.numpy_function(self._local_value, [], tf.float32, stateful=True)

    @tf.autograph.experimental.do_not_convert
    def _local_value(self) -> np.float32:
        return np.float32(self.local_stats()[0])

    def reset_state(self) -> None:
        self.records = []
        self._local = None


class CocoView(tf.keras.metrics.Metric):
    """One more number of the owner's COCO evaluation (mAP@0.5, mAP@0.75, a class's AP)."""

    reduction_across_ranks = "gather"

    def __init__(self, owner: CocoMap, index: int, name: str) -> None:
        super().__init__(name=name)
        self._owner = owner
        self._index = index

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the owner keeps the records."""
        del args, kwargs

    def local_results(self) -> None:
        """Nothing to gather: the owner gathered the records and scored them first."""
        return None

    def result_from(self, parts: list[Any]) -> float:
        return float(self._owner.last[self._index])

    def result(self) -> tf.Tensor:
        return tf.numpy_function(self._local_value, [], tf.float32, stateful=True)

    @tf.autograph.experimental.do_not_convert
    def _local_value(self) -> np.float32:
        return np.float32(self._owner.local_stats()[self._index])

    def reset_state(self) -> None:
        """Nothing: the owner resets the records."""
        return


def detection_metrics(anchors: Any, params: dict[str, Any], num_classes: int, image_shape: tuple[int, ...],
                      class_names: list[str] | None = None) -> dict[str, tf.keras.metrics.Metric]:
    """{'map', 'map_50', 'map_75', 'ap_<class>' per class}, updated with (targets, outputs); `map`
    first. `<class>` is the class's name when the data names its classes, else its index."""
    from dsl.modelers.class_keys import class_keys

    owner = CocoMap(anchors, params, num_classes, image_shape)
    metrics: dict[str, tf.keras.metrics.Metric] = {"map": owner}
    metrics["map_50"] = CocoView(owner, 1, "map_50")
    metrics["map_75"] = CocoView(owner, 2, "map_75")
    for k, key in enumerate(class_keys(num_classes, class_names)):
        metrics[f"ap_{key}"] = CocoView(owner, 3 + k, f"ap_{key}")
    return metrics
