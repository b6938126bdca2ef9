"""P6's hand-written detection reference: anchors, matching and loss as a Keras user writes them.

Modelled on keras.io's RetinaNet example ("Object Detection with RetinaNet"): an anchor grid in
numpy, a `LabelEncoder` mapped over the `tf.data` batches that matches each image's boxes to the
anchors and codes the targets there (on the input pipeline's threads, overlapping the step), and
a `RetinaNetLoss` (sigmoid focal loss for the classes, smooth-L1 for the boxes, both divided by
the positive anchors) that `model.fit` or a `tf.function` loop minimises on the network's raw
(B, anchors, 4 + classes) outputs. The rules are dslrun's `object_detection` modeler's (the
same IoU thresholds, each box also claiming its best anchor, the same box coding, focal
alpha / gamma and smooth-L1 beta), so both sides do the same work per step; where it runs
differs: dslrun matches inside the train step, the reference in the input pipeline.

Not dslrun code: nothing here is imported by dsl/.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

VARIANCES = (0.1, 0.1, 0.2, 0.2)


def anchor_grid(levels: list[int], sizes: list[float], scales: list[float], ratios: list[float],
                height: int, width: int) -> np.ndarray:
    """(A, 4) [y_min, x_min, y_max, x_max] normalised: per level, row, column, scale, ratio."""
    grids = []
    for level, size in zip(levels, sizes):
        stride = 2 ** level
        rows, cols = math.ceil(height / stride), math.ceil(width / stride)
        for row in range(rows):
            for col in range(cols):
                cy, cx = (row + 0.5) * stride, (col + 0.5) * stride
                for scale in scales:
                    for ratio in ratios:
                        h, w = size * scale * math.sqrt(ratio), size * scale / math.sqrt(ratio)
                        grids.append([(cy - h / 2) / height, (cx - w / 2) / width,
                                      (cy + h / 2) / height, (cx + w / 2) / width])
    return np.asarray(grids, np.float32)


def _iou(boxes: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """(B, M, A) IoU of boxes (B, M, 4) with anchors (A, 4)."""
    b, a = boxes[:, :, None, :], anchors[None, None, :, :]
    inter_h = tf.maximum(tf.minimum(b[..., 2], a[..., 2]) - tf.maximum(b[..., 0], a[..., 0]), 0.0)
    inter_w = tf.maximum(tf.minimum(b[..., 3], a[..., 3]) - tf.maximum(b[..., 1], a[..., 1]), 0.0)
    inter = inter_h * inter_w
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    return tf.math.divide_no_nan(inter, area_b + area_a - inter)


class LabelEncoder:
    """Batches of (images, {boxes, classes, count}) -> (images, y_true (B, A, 5)): per anchor the
    coded box and its class (-1 background, -2 ignored)."""

    def __init__(self, anchors: np.ndarray, matched_iou: float = 0.5, unmatched_iou: float = 0.4) -> None:
        self.anchors = tf.constant(anchors)
        self.matched_iou, self.unmatched_iou = matched_iou, unmatched_iou

    def encode_batch(self, images: tf.Tensor, targets: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        boxes, classes = targets["boxes"], tf.cast(targets["classes"], tf.int32)
        real = tf.sequence_mask(targets["count"], tf.shape(boxes)[1])  # (B, M)
        iou = tf.where(real[..., None], _iou(boxes, self.anchors), -1.0)
        best_box = tf.argmax(iou, axis=1, output_type=tf.int32)  # (B, A)
        best_iou = tf.reduce_max(iou, axis=1)
        # Each real box also takes the anchor it overlaps most (a box of an odd size is learnt too).
        claims = tf.one_hot(tf.argmax(iou, axis=2, output_type=tf.int32), tf.shape(self.anchors)[0]) \
            * tf.cast(real, tf.float32)[..., None]  # (B, M, A)
        claimed = tf.reduce_max(claims, axis=1) > 0
        best_box = tf.where(claimed, tf.argmax(claims, axis=1, output_type=tf.int32), best_box)
        positive = tf.logical_or(best_iou >= self.matched_iou, claimed)
        ignored = tf.logical_and(~positive, best_iou >= self.unmatched_iou)
        labels = tf.where(positive, tf.gather(classes, best_box, batch_dims=1), tf.where(ignored, -2, -1))
        coded = self._code(tf.gather(boxes, best_box, batch_dims=1))
        return images, tf.concat([coded, tf.cast(labels, tf.float32)[..., None]], axis=-1)

    def _code(self, boxes: tf.Tensor) -> tf.Tensor:
        """Faster R-CNN deltas of each anchor's box, divided by the variances."""
        def centres(b: tf.Tensor) -> tuple[tf.Tensor, ...]:
            h, w = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
            return b[..., 0] + h / 2, b[..., 1] + w / 2, h, w

        cy, cx, h, w = centres(boxes)
        acy, acx, ah, aw = centres(self.anchors)
        h, w = tf.maximum(h, 1e-6), tf.maximum(w, 1e-6)
        deltas = tf.stack([(cy - acy) / ah, (cx - acx) / aw, tf.math.log(h / ah), tf.math.log(w / aw)], axis=-1)
        return deltas / tf.constant(VARIANCES)


class RetinaNetLoss(tf.keras.losses.Loss):
    """Focal loss over the classes plus smooth-L1 over the positives' boxes, each summed over the
    batch and divided by its positive anchors (reduction SUM: the per-image parts add up to it)."""

    def __init__(self, num_classes: int, alpha: float = 0.25, gamma: float = 2.0, beta: float = 0.11,
                 box_weight: float = 1.0) -> None:
        super().__init__(reduction=tf.keras.losses.Reduction.SUM, name="retinanet_loss")
        self.num_classes, self.alpha, self.gamma, self.beta, self.box_weight = num_classes, alpha, gamma, beta, box_weight

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_pred = tf.cast(y_pred, tf.float32)
        labels = tf.cast(y_true[..., 4], tf.int32)
        positive = tf.cast(labels >= 0, tf.float32)
        one_hot = tf.one_hot(labels, self.num_classes)  # background and ignored: all zeros
        logits = y_pred[..., 4:]
        cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=one_hot, logits=logits)
        probability = tf.sigmoid(logits)
        p_t = one_hot * probability + (1 - one_hot) * (1 - probability)
        alpha = one_hot * self.alpha + (1 - one_hot) * (1 - self.alpha)
        focal = tf.reduce_sum(alpha * tf.pow(1.0 - p_t, self.gamma) * cross_entropy, axis=-1)
        focal *= tf.cast(labels != -2, tf.float32)
        difference = tf.abs(y_pred[..., :4] - y_true[..., :4])
        smooth = tf.reduce_sum(tf.where(difference < self.beta, 0.5 * difference ** 2 / self.beta,
                                        difference - 0.5 * self.beta), axis=-1) * positive
        positives = tf.maximum(tf.reduce_sum(positive), 1.0)
        return (tf.reduce_sum(focal, axis=-1) + self.box_weight * tf.reduce_sum(smooth, axis=-1)) / positives


def reference(pipeline: dict[str, Any], image_shape: tuple[int, ...], num_classes: int) -> tuple[LabelEncoder, Any]:
    """The encoder and the loss for `pipeline`'s anchors and modeler settings; the anchors are
    checked against dslrun's (dsl.tasks.object_detection._anchors), so both sides train the same detector."""
    from dsl.tasks.object_detection._anchors import anchor_boxes, anchors_of

    spec = anchors_of(pipeline["network"])
    anchors = anchor_grid(spec["levels"], spec["sizes"], spec["scales"], spec["ratios"], *image_shape[:2])
    np.testing.assert_allclose(anchors, anchor_boxes(spec, image_shape), atol=1e-6)
    modeler = pipeline["modeler"]
    encoder = LabelEncoder(anchors, modeler["matched_iou"], modeler["unmatched_iou"])
    loss = RetinaNetLoss(num_classes, modeler["focal_alpha"], modeler["focal_gamma"],
                         box_weight=modeler["box_loss_weight"])
    return encoder, loss
