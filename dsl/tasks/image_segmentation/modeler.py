"""`image_segmentation`: per-pixel softmax cross-entropy + L2, an optimizer, a schedule, IoU metrics.

The task of the segmentation networks (`unet`, `fcn`): targets are masks of class indices
(B, H, W), outputs per-pixel logits (B, H, W, num_classes). Pixels whose mask value is the
inputter's `ignore_label` count in no loss nor metric. What every modeler shares
(optimizer, lr_schedule, weight_decay) is `dsl.modelers.base.BaseModeler`.

Metrics: `mean_iou`, `pixel_accuracy` and `iou_<k>` for each class k, from one confusion
matrix per phase (dsl/tasks/image_segmentation/_metrics.py). Over several ranks the matrices
are summed before any IoU is computed (dsl/engine/metric_reduction.py), so every value is
the one a single process gets on the same data.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import checked, one_per_class
from dsl.modelers.base import TRAINING_PARAMS, BaseModeler, check_patterns
from dsl.modelers.class_keys import class_keys

PARAMS: dict[str, dict[str, Any]] = {
    "class_weights": {
        "description": (
            "Weight of each class's pixels in the loss, class 0 first (one per class, e.g. higher for rare "
            "classes); the loss stays a mean over the counted pixels. null = every pixel weighs 1."
        ),
        "type": ["array", "null"],
        "items": {"type": "number", "minimum": 0.0},
        "minItems": 2,
        "default": None,
    },
    "probabilities": {
        "description": "Also return per-pixel class probabilities (B, H, W, num_classes) from the serving signature.",
        "type": "boolean",
        "default": False,
    },
    **TRAINING_PARAMS,
}

METRICS = ["mean_iou", "pixel_accuracy"]


def outputs(params: dict[str, Any], pipeline: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """What each phase reports, for `dslrun validate`: loss, mean_iou, pixel_accuracy and the
    per-class IoU of every class (the inputter's num_classes, or class_weights' length), named
    `iou_<name>` by the inputter's class_names, else `iou_<k>`."""
    inputter = (pipeline or {}).get("inputter") or {}
    classes = inputter.get("num_classes")
    if not isinstance(classes, int):
        classes = len(params.get("class_weights") or [])
    per_class = iou_names(classes, inputter.get("class_names"))
    terms = ["cross_entropy", "l2_loss"] if params.get("weight_decay") else []  # BaseModeler.loss_terms
    metrics = ["loss", *terms, *METRICS, *per_class]
    return {"train": [*metrics, "learning_rate"], "val": metrics}


def iou_names(num_classes: int, class_names: Any) -> list[str]:
    """`iou_<name>` per class when the classes have usable names (letters, digits and `_`; other
    characters become `_`; distinct), else `iou_<k>`."""
    return [f"iou_{key}" for key in class_keys(num_classes, class_names)]


@register(
    "modeler",
    "image_segmentation",
    params=PARAMS,
    rules=[checked(check_patterns), one_per_class("class_weights", "class weights", "modeler")],
    outputs=outputs,
    batch=("image", "mask"),
    predict_options={
        "overlay": {"type": "flag", "help": "Also write each image with its prediction drawn over it, under --out"},
        "color": {"type": "flag", "help": "Also write each mask in colour (<name>_color.png, one colour per class) for "
                                          "people; the mask PNG itself stays class indices"},
    },
)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Semantic segmentation: per-pixel cross-entropy ignoring ignore_label (+ class weights, L2), mean IoU."""
    return ImageSegmentationModeler(params, context)


class ImageSegmentationModeler(BaseModeler):
    """Loss, metrics, predictions and predict records of per-pixel classification.

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`num_classes`, `ignore_label`, `class_names`, `pipeline['runner']`).
    """

    PARAMS = PARAMS

    def __init__(self, params: dict[str, Any], context: BuildContext) -> None:
        super().__init__(params, context)
        self.num_classes = int(context.num_classes)
        self.ignore_label: int | None = context.fact("ignore_label")
        weights = self.params["class_weights"]
        if weights is not None and len(weights) != self.num_classes:
            raise DslError(
                f"modeler.class_weights: {len(weights)} weights for {self.num_classes} classes (inputter.num_classes); "
                "give one weight per class, class 0 first"
            )

    def loss(self, masks: Any, logits: Any, model: Any) -> dict[str, Any]:
        """{'loss': cross_entropy + l2_loss, 'cross_entropy': mean over the counted pixels, 'l2_loss'}."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        masks = tf.cast(masks, tf.int32)
        counted = tf.ones_like(masks, tf.bool) if self.ignore_label is None else tf.not_equal(masks, self.ignore_label)
        labels = tf.where(counted, masks, 0)  # any class: the pixel's weight is 0
        per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        weights = tf.cast(counted, tf.float32)
        if self.params["class_weights"] is not None:
            weights *= tf.gather(tf.constant(self.params["class_weights"], tf.float32), labels)
        cross_entropy = tf.math.divide_no_nan(tf.reduce_sum(per_pixel * weights),
                                              tf.reduce_sum(tf.cast(counted, tf.float32)))
        l2_loss = self.l2_loss(model)
        return {"loss": cross_entropy + l2_loss, "cross_entropy": cross_entropy, "l2_loss": l2_loss}

    def metrics(self, mode: str) -> dict[str, Any]:
        """Fresh metrics, updated with `update_state(masks, logits)`: mean_iou, pixel_accuracy, iou_<k>."""
        from dsl.tasks.image_segmentation._metrics import segmentation_metrics

        return segmentation_metrics(self.num_classes, self.ignore_label,
                                    iou_names(self.num_classes, getattr(self.context, "class_names", None)))

    def predictions(self, logits: Any) -> dict[str, Any]:
        """{'mask': int32 (B, H, W)} (+ 'probabilities': float32 (B, H, W, num_classes) when asked)."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        found = {"mask": tf.argmax(logits, axis=-1, output_type=tf.int32)}
        if self.params["probabilities"]:
            found["probabilities"] = tf.nn.softmax(logits, axis=-1)
        return found

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """Write the mask PNG (and with `options['overlay']` the overlay) under `options['out']`;
        `{input..., "mask", ["overlay"], "size", "classes": share of pixels per class}`."""
        from dsl.modelers.mask_records import mask_record

        return mask_record(source, predictions["mask"][0], features, self.num_classes, options["out"],
                           bool(options.get("overlay")), getattr(self.context, "class_names", None),
                           options.setdefault("taken", set()), color=bool(options.get("color")))
