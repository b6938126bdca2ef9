"""`image_classification`: softmax cross-entropy + L2, an optimizer, a learning-rate schedule, accuracy.

The modeler is what TF Model Garden calls a Task: the network says what the model is, the
modeler says what it learns and how. The loop calls exactly the methods of
`dsl.interfaces.Modeler`; TensorFlow is imported inside them, never when the module is imported.

This module is the task only: its loss, metrics and predictions. The `optimizer` and
`lr_schedule` settings every modeler shares (tables, schema, defaults, building) live in
`dsl.modelers._optimizers` and `dsl.modelers._schedules`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from dsl.errors import DslError
from dsl.modelers._optimizers import fill_optimizer, optimizer_param
from dsl.modelers._schedules import fill_schedule, schedule_param
from dsl.registry import register

PARAMS: dict[str, dict[str, Any]] = {
    "label_smoothing": {
        "description": "Share of each label's probability spread evenly over all classes (0 = one-hot labels).",
        "type": "number",
        "minimum": 0.0,
        "exclusiveMaximum": 1.0,
        "default": 0.0,
    },
    "weight_decay": {
        "description": (
            "L2 coefficient: loss += weight_decay * sum(v^2)/2 over the trainable variables not "
            "matched by skip_l2_loss_vars (Lambda's l2_weight_decay; 0 = no L2 loss)."
        ),
        "type": "number",
        "minimum": 0.0,
        "default": 0.0,
    },
    "skip_l2_loss_vars": {
        "description": (
            "Regular expressions searched in each variable's name (e.g. 'conv1_bn/gamma:0', "
            "'logits/bias:0'); matching variables get no L2 loss nor AdamW decay. The default skips "
            "every normalisation scale (gamma) and offset (beta) and every bias, whatever the layer's name; "
            "Lambda's [batch_normalization, bias] does the same for this project's networks only."
        ),
        "type": "array",
        "items": {"type": "string", "format": "regex", "minLength": 1},
        "default": ["gamma", "beta", "bias"],
    },
    "top_k": {
        "description": "Extra top-k accuracies to report, e.g. [5] adds top_5_accuracy (each k at least 2).",
        "type": "array",
        "items": {"type": "integer", "minimum": 2},
        "uniqueItems": True,
        "default": [],
    },
    "optimizer": optimizer_param(),
    "lr_schedule": schedule_param(),
}


def metric_names(top_k: list[int]) -> list[str]:
    """The metrics `metrics()` returns, by name: accuracy, then each top-k accuracy."""
    return ["accuracy", *(f"top_{k}_accuracy" for k in top_k)]


def outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """What each phase reports with this modeler (the loop adds its own `loss` mean and the
    optimizer's `learning_rate`, both the modeler's to define), for `dslrun validate`."""
    metrics = ["loss", *metric_names(params.get("top_k") or [])]
    return {"train": [*metrics, "learning_rate"], "val": metrics}


@register(
    "modeler",
    "image_classification",
    params=PARAMS,
    description="Image classification: cross-entropy (+ label smoothing, L2), optimizer, lr schedule, accuracy.",
    outputs=outputs,
)
def build(params: dict[str, Any], context: Any) -> ImageClassificationModeler:
    """The modeler for the resolved `modeler` section."""
    return ImageClassificationModeler(params, context)


class ImageClassificationModeler:
    """Loss, optimizer, schedule, metrics and predictions of a classifier (dsl.interfaces.Modeler).

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`num_classes`, and `pipeline['runner']` for the run's length).
    """

    def __init__(self, params: dict[str, Any], context: Any) -> None:
        p = {name: copy.deepcopy(spec["default"]) for name, spec in PARAMS.items()}
        p.update({key: value for key, value in params.items() if key != "type"})
        p["optimizer"] = fill_optimizer(p["optimizer"])
        p["lr_schedule"] = fill_schedule(p["lr_schedule"])
        self.params = p
        self.context = context
        self._skip_patterns = _compile_patterns(p["skip_l2_loss_vars"])
        self._check_top_k(p["top_k"])
        self._l2_cache: tuple[Any, list[Any]] | None = None

    def learning_rate(self, steps_per_epoch: int | None, scale: float = 1.0) -> Any:
        """The schedule of the optimizer step; `scale` multiplies the base rate (lr scaling)."""
        from dsl.modelers._schedules import build_schedule

        base = self.params["optimizer"]["learning_rate"] * scale
        return build_schedule(self.params["lr_schedule"], base, steps_per_epoch, self._run_steps(steps_per_epoch))

    def optimizer(self, steps_per_epoch: int | None, scale: float = 1.0) -> Any:
        """A fresh Keras optimizer driven by `learning_rate(steps_per_epoch, scale)`."""
        from dsl.modelers._optimizers import build_optimizer

        schedule = self.learning_rate(steps_per_epoch, scale)
        return build_optimizer(self.params["optimizer"], schedule, self.params["skip_l2_loss_vars"])

    def loss(self, labels: Any, logits: Any, model: Any) -> dict[str, Any]:
        """{'loss': cross_entropy + l2_loss, 'cross_entropy': batch mean, 'l2_loss': weighted L2 term}."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
        smoothing = self.params["label_smoothing"]
        if smoothing:
            one_hot = tf.one_hot(labels, depth=logits.shape[-1], dtype=tf.float32)
            per_example = tf.keras.losses.categorical_crossentropy(
                one_hot, logits, from_logits=True, label_smoothing=smoothing
            )
        else:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        cross_entropy = tf.reduce_mean(per_example)
        l2_loss = self._l2_loss(model)
        return {"loss": cross_entropy + l2_loss, "cross_entropy": cross_entropy, "l2_loss": l2_loss}

    def l2_variables(self, model: Any) -> list[Any]:
        """The trainable variables the L2 loss covers, chosen once per model (not per step)."""
        if self._l2_cache is None or self._l2_cache[0] is not model:
            chosen = [
                v for v in model.trainable_variables if not any(p.search(v.name) for p in self._skip_patterns)
            ]
            self._l2_cache = (model, chosen)
        return self._l2_cache[1]

    def metrics(self, mode: str) -> dict[str, Any]:
        """Fresh metrics, updated with `update_state(labels, logits)`: accuracy and each top-k."""
        import tensorflow as tf

        accuracy, *top_names = metric_names(self.params["top_k"])
        metrics = {accuracy: tf.keras.metrics.SparseCategoricalAccuracy(name=accuracy)}
        for k, name in zip(self.params["top_k"], top_names):
            metrics[name] = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=k, name=name)
        return metrics

    def predictions(self, logits: Any) -> dict[str, Any]:
        """{'classes': int32 (B,), 'probabilities': float32 (B, num_classes)}."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        return {
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "probabilities": tf.nn.softmax(logits, axis=-1),
        }

    def _l2_loss(self, model: Any) -> Any:
        import tensorflow as tf

        decay = self.params["weight_decay"]
        variables = self.l2_variables(model) if decay else []
        if not variables:
            return tf.constant(0.0, tf.float32)
        return decay * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables])

    def _run_steps(self, steps_per_epoch: int | None) -> int | None:
        """Optimizer steps in the whole run, from `runner.max_iters` or `runner.max_epochs`."""
        runner = (getattr(self.context, "pipeline", None) or {}).get("runner") or {}
        if runner.get("max_iters"):
            return int(runner["max_iters"])
        if runner.get("max_epochs") and steps_per_epoch:
            return int(runner["max_epochs"]) * int(steps_per_epoch)
        return None

    def _check_top_k(self, top_k: list[int]) -> None:
        classes = getattr(self.context, "num_classes", None)
        for k in top_k:
            if classes is not None and k >= classes:
                raise DslError(
                    f"modeler.top_k: top_{k}_accuracy is always 1 with {classes} classes; "
                    f"use values below {classes}, or remove it"
                )


def _compile_patterns(patterns: list[str]) -> list[re.Pattern[str]]:
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise DslError(
                f"modeler.skip_l2_loss_vars[{index}]: {pattern!r} is not a regular expression ({exc}); "
                "escape special characters with a backslash"
            ) from None
    return compiled
