"""`object_detection`: anchor matching, focal loss + box loss + L2, NMS decode, COCO mAP.

The task of the `retinanet` network, whose outputs are raw per anchor: 4 box deltas then
one logit per class (B, anchors, 4 + num_classes). Targets are the detection inputters'
padded boxes, classes and counts (dsl/tasks/object_detection/_inputter.py). The anchors are derived from
the network section and the inputter's image shape (dsl/tasks/object_detection/_anchors.py), as the
network derives them. What every modeler shares (optimizer, lr_schedule, weight_decay) is
`dsl.modelers.base.BaseModeler`.

Loss: anchors matched by IoU (dsl/tasks/object_detection/_box_coding.py), sigmoid focal loss over every
non-ignored anchor and smooth-L1 of the coded boxes (or GIoU of the decoded boxes) over the
positives, both divided by the number of positives of the global batch (on N replicas, each
divides by that count / N, so their averaged gradient is one process's: dsl.engine.global_batch). Reported apart: `class_loss`,
`box_loss` (and `l2_loss` with weight_decay).

Predictions and serving: `tf.image.combined_non_max_suppression` per class, returning the
TF Object Detection API's `detection_boxes` (normalised [y_min, x_min, y_max, x_max]),
`detection_scores`, `detection_classes`, `num_detections`.

Metrics (val and eval): `map` (COCO mAP@[.5:.95]), `map_50`, `map_75` and `ap_<k>` per
class, by pycocotools over every rank's detections gathered (exact, not averaged).
"""

from __future__ import annotations

from typing import Any, ClassVar

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.modelers.base import TRAINING_PARAMS, BaseModeler

PARAMS: dict[str, dict[str, Any]] = {
    "matched_iou": {
        "description": "An anchor overlapping a true box at least this much (IoU) learns that box and its class.",
        "type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0, "default": 0.5,
    },
    "unmatched_iou": {
        "description": "An anchor overlapping every true box less than this is background; in between it is ignored.",
        "type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.4,
    },
    "focal_alpha": {
        "description": "Focal loss weight of the positives (the negatives weigh 1 - alpha).",
        "type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.25,
    },
    "focal_gamma": {
        "description": "Focal loss focusing exponent: 0 = plain sigmoid cross-entropy.",
        "type": "number", "minimum": 0.0, "default": 2.0,
    },
    "box_loss": {
        "description": "smooth_l1 of the coded box deltas, or giou (1 - generalised IoU of the decoded boxes).",
        "enum": ["smooth_l1", "giou"], "default": "smooth_l1",
    },
    "box_loss_weight": {
        "description": "Weight of the box loss against the class loss.",
        "type": "number", "minimum": 0.0, "default": 1.0,
    },
    "score_threshold": {
        "description": "Detections scoring below this are dropped before non-maximum suppression.",
        "type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.05,
    },
    "nms_iou": {
        "description": "Non-maximum suppression drops a detection overlapping a better one of its class this much.",
        "type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0, "default": 0.5,
    },
    "max_detections": {
        "description": "Detections kept per image (and per class) after non-maximum suppression.",
        "type": "integer", "minimum": 1, "default": 100,
    },
    **TRAINING_PARAMS,
}

METRICS = ["map", "map_50", "map_75"]


def outputs(params: dict[str, Any], pipeline: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """What each phase reports, for `dslrun validate`: the losses; val adds map, map_50, map_75 and
    `ap_<class>`, named as the run names them: by the inputter's `classes`, else a COCO file's
    category names (validate named them `ap_<k>` while the run logged `ap_three`: a monitor that
    passed validate failed after the first epoch), else `ap_<k>`."""
    from dsl.modelers.class_keys import class_keys
    from dsl.tasks.object_detection._box_listing import coco_class_names

    inputter = (pipeline or {}).get("inputter") or {}
    classes = inputter.get("num_classes")
    names = inputter.get("classes")
    if names is None and inputter.get("type") == "coco_json":
        names = coco_class_names(inputter)
    per_class = [f"ap_{key}" for key in class_keys(classes, names)] if isinstance(classes, int) else []
    terms = ["class_loss", "box_loss", *(["l2_loss"] if params.get("weight_decay") else [])]
    return {"train": ["loss", *terms, "learning_rate"], "val": ["loss", *terms, *METRICS, *per_class]}


@register(
    "modeler",
    "object_detection",
    params=PARAMS,
    outputs=outputs,
    batch=("image", "boxes"),
    predict_options={
        "overlay": {"type": "flag", "help": "Also write each image with its prediction drawn over it, under --out"},
        "all_classes": {"type": "flag", "help": "Keep every class's box of an object (by default a box overlapping a "
                                                "better one of another class by modeler.nms_iou is left out)"},
        # 0.3: a focal-loss detector scores its right boxes low, and 0.5 hid most of them from two new
        # users (docs/tasks/detection.md); one box per object keeps 0.3 readable.
        "threshold": {"type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.3,
                      "help": "Only the detections scoring at least this in each record and drawing (the model keeps "
                              "every one above modeler.score_threshold, which mAP needs)"},
    },
)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Single-stage detection: IoU anchor matching, focal + smooth-L1/GIoU loss, NMS, COCO mAP."""
    return ObjectDetectionModeler(params, context)


class ObjectDetectionModeler(BaseModeler):
    """Loss, metrics, predictions and predict records of a single-stage detector.

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`image_shape`, `num_classes`, `class_names`, the network's `anchors`).
    """

    # What `dslrun export` prints beside the outputs' shapes: what a client must know to read them.
    serving_notes: ClassVar[dict[str, str]] = {
        "detection_boxes": "normalised [y_min, x_min, y_max, x_max] of the input image, in [0, 1]",
        "detection_classes": "class indices from 0, as inputter.classes orders them",
        "detection_scores": "the best first; rows past num_detections are padding",
    }

    PARAMS = PARAMS

    def __init__(self, params: dict[str, Any], context: BuildContext) -> None:
        from dsl.language.errors import DslError
        from dsl.tasks.object_detection._anchors import anchor_boxes, anchors_of

        super().__init__(params, context)
        if self.params["unmatched_iou"] > self.params["matched_iou"]:
            raise DslError(f"modeler.unmatched_iou: {self.params['unmatched_iou']} is above matched_iou "
                           f"{self.params['matched_iou']}; background anchors must overlap less than matched ones")
        self.num_classes = int(context.num_classes)
        self.image_shape = tuple(context.image_shape)
        self.anchors = anchor_boxes(context.fact("anchors") or anchors_of({}), self.image_shape)
        self._say_anchor_misfit(context)

    def _say_anchor_misfit(self, context: BuildContext) -> None:
        """Boxes no anchor matches are never learnt: `validate --data` says so, and so does the start of a
        run (trial A14 trained 4-6 px anchors on 16-40 px digits to mAP 0.03, with nothing said)."""
        import sys

        from dsl.tasks.object_detection._anchors import anchor_sides, anchors_of
        from dsl.tasks.object_detection._data_check import anchor_misfit

        sides = context.fact("train_box_sides")
        if not sides or not context.placement.is_chief:
            return
        anchors = anchor_sides({"anchors": context.fact("anchors") or anchors_of({})})
        misfit = anchor_misfit(sides, anchors, (int(self.image_shape[0]), int(self.image_shape[1])), "train")
        if misfit:
            print(f"dslrun: warning: network.anchors: {misfit}", file=sys.stderr, flush=True)

    def loss_terms(self) -> list[str]:
        return ["class_loss", "box_loss", *(["l2_loss"] if self.params["weight_decay"] else [])]

    def loss(self, targets: Any, outputs: Any, model: Any) -> dict[str, Any]:
        """{'loss': class_loss + box_loss_weight * box_loss + l2_loss, each part, and the positives
        they were divided by as the batch's `weight` in a val phase's mean}."""
        import tensorflow as tf

        from dsl.engine.global_batch import count_normaliser
        from dsl.tasks.object_detection._box_coding import decode, encode, focal_loss, giou_loss, match, smooth_l1

        p = self.params
        outputs = tf.cast(outputs, tf.float32)
        anchors = tf.constant(self.anchors)
        boxes, labels, positive = match(targets, anchors, p["matched_iou"], p["unmatched_iou"])
        positives = count_normaliser(tf.reduce_sum(tf.cast(positive, tf.float32)))
        class_loss = tf.reduce_sum(focal_loss(labels, outputs[..., 4:], p["focal_alpha"], p["focal_gamma"])) / positives
        if p["box_loss"] == "giou":
            per_anchor = giou_loss(decode(outputs[..., :4], anchors), boxes)
        else:
            per_anchor = smooth_l1(outputs[..., :4], encode(boxes, anchors))
        box_loss = tf.reduce_sum(per_anchor * tf.cast(positive, tf.float32)) / positives
        l2_loss = self.l2_loss(model)
        total = class_loss + p["box_loss_weight"] * box_loss + l2_loss
        return {"loss": total, "class_loss": class_loss, "box_loss": box_loss, "l2_loss": l2_loss, "weight": positives}

    def metrics(self, mode: str) -> dict[str, Any]:
        """COCO mAP and its views for val/test (gathered across ranks); none while training (NMS and
        COCOeval per train step would cost more than the step)."""
        if mode == "train":
            return {}
        from dsl.language.errors import DslError
        from dsl.tasks.object_detection._coco_metrics import detection_metrics

        try:
            import pycocotools.cocoeval  # noqa: F401
        except ImportError:
            raise DslError("the object_detection modeler scores COCO mAP with pycocotools, which is not installed; "
                           "pip install 'dslrun[train]' (or pycocotools)") from None

        return detection_metrics(self.anchors, self.params, self.num_classes, self.image_shape,
                                 getattr(self.context, "class_names", None))

    def predictions(self, outputs: Any) -> dict[str, Any]:
        """`detection_boxes` (B, N, 4) normalised [y_min, x_min, y_max, x_max], `detection_scores` (B, N),
        `detection_classes` int32 (B, N), `num_detections` int32 (B,), after NMS."""
        import tensorflow as tf

        from dsl.tasks.object_detection._box_coding import detect

        return detect(outputs, tf.constant(self.anchors), self.params)

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """`{input..., "detections": [{"class", "label", "score", "box": [x_min, y_min, x_max, y_max]}]}`, boxes in
        pixels of the input file; with `options['overlay']` the image with the boxes drawn, under `options['out']`."""
        from dsl.tasks.object_detection._box_records import box_record

        options.setdefault("nms_iou", self.params["nms_iou"])  # the overlap that makes two boxes one object
        return box_record(source, predictions, features, getattr(self.context, "class_names", None), options)
