"""Anchor matching, box coding, the detection losses and the NMS decode (TensorFlow).

Boxes are [y_min, x_min, y_max, x_max], normalised to the image. A box is coded against an
anchor as Faster R-CNN does, scaled by the usual variances (0.1, 0.1, 0.2, 0.2):
(dy / h_a, dx / w_a, log(h / h_a), log(w / w_a)) / variances, from the centres' offsets.

Matching (RetinaNet): an anchor whose best IoU with a true box is at least `matched_iou`
is a positive of that box; below `unmatched_iou` a negative (background for every class);
in between ignored. Each true box also claims the anchor it overlaps most, so a box of an
unusual size is still learnt. Padding rows (beyond `count`) take part in nothing.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

VARIANCES = (0.1, 0.1, 0.2, 0.2)


def iou_matrix(boxes: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """IoU (..., M, A) of boxes (..., M, 4) and anchors (A, 4)."""
    boxes = boxes[..., :, None, :]
    y_min = tf.maximum(boxes[..., 0], anchors[:, 0])
    x_min = tf.maximum(boxes[..., 1], anchors[:, 1])
    y_max = tf.minimum(boxes[..., 2], anchors[:, 2])
    x_max = tf.minimum(boxes[..., 3], anchors[:, 3])
    inter = tf.maximum(y_max - y_min, 0.0) * tf.maximum(x_max - x_min, 0.0)
    area_b = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    area_a = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
    return tf.math.divide_no_nan(inter, area_b + area_a - inter)


def _centres(boxes: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    height = boxes[..., 2] - boxes[..., 0]
    width = boxes[..., 3] - boxes[..., 1]
    return boxes[..., 0] + height / 2, boxes[..., 1] + width / 2, height, width


def encode(boxes: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """Deltas (..., A, 4) that turn each anchor into its box (..., A, 4)."""
    cy, cx, h, w = _centres(boxes)
    acy, acx, ah, aw = _centres(anchors)
    h, w = tf.maximum(h, 1e-6), tf.maximum(w, 1e-6)
    deltas = tf.stack([(cy - acy) / ah, (cx - acx) / aw, tf.math.log(h / ah), tf.math.log(w / aw)], axis=-1)
    return deltas / tf.constant(VARIANCES, tf.float32)


def decode(deltas: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """Boxes (..., A, 4) from deltas (..., A, 4), clipped to the image."""
    deltas = deltas * tf.constant(VARIANCES, tf.float32)
    acy, acx, ah, aw = _centres(anchors)
    cy = deltas[..., 0] * ah + acy
    cx = deltas[..., 1] * aw + acx
    h = tf.exp(tf.minimum(deltas[..., 2], 4.0)) * ah
    w = tf.exp(tf.minimum(deltas[..., 3], 4.0)) * aw
    boxes = tf.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)
    return tf.clip_by_value(boxes, 0.0, 1.0)


def match(targets: dict[str, tf.Tensor], anchors: tf.Tensor, matched_iou: float,
          unmatched_iou: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per anchor: its true box (B, A, 4), its class (B, A; -1 background, -2 ignored), and positive (B, A)."""
    boxes, classes, count = targets["boxes"], tf.cast(targets["classes"], tf.int32), tf.cast(targets["count"], tf.int32)
    real = tf.sequence_mask(count, tf.shape(boxes)[1])  # (B, M)
    iou = iou_matrix(boxes, anchors) * tf.cast(real, tf.float32)[..., None] - tf.cast(~real, tf.float32)[..., None]
    best_box = tf.argmax(iou, axis=1, output_type=tf.int32)  # (B, A)
    best_iou = tf.reduce_max(iou, axis=1)
    # Each real box also claims the anchor it overlaps most.
    best_anchor = tf.argmax(iou, axis=2, output_type=tf.int32)  # (B, M)
    claimed = tf.reduce_any(tf.logical_and(tf.one_hot(best_anchor, tf.shape(anchors)[0], on_value=True, off_value=False),
                                           real[..., None]), axis=1)  # (B, A)
    claimer = tf.argmax(tf.cast(tf.one_hot(best_anchor, tf.shape(anchors)[0]), tf.float32)
                        * tf.cast(real, tf.float32)[..., None], axis=1, output_type=tf.int32)
    best_box = tf.where(claimed, claimer, best_box)
    positive = tf.logical_or(best_iou >= matched_iou, claimed)
    ignored = tf.logical_and(~positive, best_iou >= unmatched_iou)
    matched_boxes = tf.gather(boxes, best_box, batch_dims=1)
    matched_classes = tf.gather(classes, best_box, batch_dims=1)
    labels = tf.where(positive, matched_classes, tf.where(ignored, -2, -1))
    return matched_boxes, labels, positive


def focal_loss(labels: tf.Tensor, logits: tf.Tensor, alpha: float, gamma: float) -> tf.Tensor:
    """Sigmoid focal loss summed over classes per anchor (B, A); ignored anchors (-2) count 0."""
    num_classes = tf.shape(logits)[-1]
    one_hot = tf.one_hot(tf.maximum(labels, -1), num_classes)  # background (-1): all zeros
    per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels=one_hot, logits=logits)
    probability = tf.sigmoid(logits)
    p_t = one_hot * probability + (1 - one_hot) * (1 - probability)
    weight = (one_hot * alpha + (1 - one_hot) * (1 - alpha)) * tf.pow(1.0 - p_t, gamma)
    return tf.reduce_sum(weight * per_class, axis=-1) * tf.cast(labels != -2, tf.float32)


def smooth_l1(deltas: tf.Tensor, targets: tf.Tensor, beta: float = 0.11) -> tf.Tensor:
    """Smooth-L1 summed over the 4 coordinates (B, A)."""
    difference = tf.abs(deltas - targets)
    return tf.reduce_sum(tf.where(difference < beta, 0.5 * difference ** 2 / beta, difference - 0.5 * beta), axis=-1)


def giou_loss(boxes: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """1 - generalised IoU of predicted and true boxes (B, A)."""
    y_min = tf.maximum(boxes[..., 0], targets[..., 0])
    x_min = tf.maximum(boxes[..., 1], targets[..., 1])
    y_max = tf.minimum(boxes[..., 2], targets[..., 2])
    x_max = tf.minimum(boxes[..., 3], targets[..., 3])
    inter = tf.maximum(y_max - y_min, 0.0) * tf.maximum(x_max - x_min, 0.0)
    area_p = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    area_t = (targets[..., 2] - targets[..., 0]) * (targets[..., 3] - targets[..., 1])
    union = area_p + area_t - inter
    hull = ((tf.maximum(boxes[..., 2], targets[..., 2]) - tf.minimum(boxes[..., 0], targets[..., 0]))
            * (tf.maximum(boxes[..., 3], targets[..., 3]) - tf.minimum(boxes[..., 1], targets[..., 1])))
    iou = tf.math.divide_no_nan(inter, union)
    return 1.0 - (iou - tf.math.divide_no_nan(hull - union, hull))


def detect(outputs: tf.Tensor, anchors: tf.Tensor, params: dict[str, Any]) -> dict[str, tf.Tensor]:
    """The TF Object Detection API's outputs from raw network outputs (B, A, 4 + K), NMS per class."""
    outputs = tf.cast(outputs, tf.float32)
    boxes = decode(outputs[..., :4], anchors)
    scores = tf.sigmoid(outputs[..., 4:])
    found = tf.image.combined_non_max_suppression(
        boxes[:, :, None, :], scores, max_output_size_per_class=params["max_detections"],
        max_total_size=params["max_detections"], iou_threshold=params["nms_iou"],
        score_threshold=params["score_threshold"], clip_boxes=True)
    return {"detection_boxes": found.nmsed_boxes, "detection_scores": found.nmsed_scores,
            "detection_classes": tf.cast(found.nmsed_classes, tf.int32), "num_detections": found.valid_detections}
