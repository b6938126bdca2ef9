"""What the modelers that predict one class per example share, whatever the features are.

Softmax cross-entropy (with label smoothing) plus the L2 term of `BaseModeler`, accuracy
and top-k accuracies, predictions (class and probabilities) and the predict record. The
image and the text classification modelers are this with their own `batch` declared:
the loss of a class does not depend on what the class was predicted from.

Pure Python at import time: TensorFlow is imported inside the methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.language.context import BuildContext
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.errors import DslError
from dsl.language.rules import checked
from dsl.modelers.base import TRAINING_PARAMS, BaseModeler, check_patterns
from dsl.modelers.class_keys import class_keys

PARAMS: dict[str, dict[str, Any]] = {
    "label_smoothing": {
        "description": "Share of each label's probability spread evenly over all classes (0 = one-hot labels).",
        "type": "number",
        "minimum": 0.0,
        "exclusiveMaximum": 1.0,
        "default": 0.0,
    },
    "top_k": {
        "description": "Extra top-k accuracies to report, e.g. [5] adds top_5_accuracy (each k at least 2).",
        "type": "array",
        "items": {"type": "integer", "minimum": 2},
        "uniqueItems": True,
        "default": [],
    },
    "per_class_metrics": {
        "description": (
            "Up to this many classes, each val record of metrics.jsonl also holds every class's precision_<class>, "
            "recall_<class>, f1_<class> and support_<class> (from the val phase's confusion matrix, exact across "
            "ranks), and the matrix is drawn as confusion_matrix_val.png and a TensorBoard image; with more classes "
            "(or 0) only macro_f1 is recorded. `dslrun eval` prints the per-class table whatever the value."
        ),
        "type": "integer",
        "minimum": 0,
        "default": 50,
    },
    **TRAINING_PARAMS,
}


def metric_names(top_k: list[int]) -> list[str]:
    """The metrics `metrics()` returns, by name: accuracy, then each top-k accuracy."""
    return ["accuracy", *(f"top_{k}_accuracy" for k in top_k)]


def outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """What each phase reports with this modeler (the loop adds its own `loss` mean and the
    optimizer's `learning_rate`, both the modeler's to define), for `dslrun validate`."""
    terms = ["cross_entropy", "l2_loss"] if params.get("weight_decay") else []  # BaseModeler.loss_terms
    metrics = ["loss", *terms, *metric_names(params.get("top_k") or [])]
    return {"train": [*metrics, "learning_rate"], "val": [*metrics, MACRO_F1]}


# The val phase's mean F1 over the classes; its confusion matrix gives the per-class report.
MACRO_F1 = "macro_f1"


class ClassificationModeler(BaseModeler):
    """Loss, metrics, predictions and predict records of a classifier (dsl.engine.contracts.Modeler).

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`num_classes`, `class_names`, and `pipeline['runner']` for the run's length).
    """

    PARAMS = PARAMS

    def __init__(self, params: dict[str, Any], context: BuildContext) -> None:
        super().__init__(params, context)
        self._check_top_k(self.params["top_k"])

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
        l2_loss = self.l2_loss(model)
        return {"loss": cross_entropy + l2_loss, "cross_entropy": cross_entropy, "l2_loss": l2_loss}

    def metrics(self, mode: str) -> dict[str, Any]:
        """Fresh metrics, updated with `update_state(labels, logits)`: accuracy and each top-k; outside
        training also `macro_f1`, whose confusion matrix `report` reads."""
        import tensorflow as tf

        accuracy, *top_names = metric_names(self.params["top_k"])
        metrics = {accuracy: tf.keras.metrics.SparseCategoricalAccuracy(name=accuracy)}
        for k, name in zip(self.params["top_k"], top_names):
            metrics[name] = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=k, name=name)
        if mode != "train":
            from dsl.modelers._class_report import ConfusionF1

            metrics[MACRO_F1] = ConfusionF1(int(self.context.num_classes), name=MACRO_F1)
        return metrics

    def report(self, metrics: dict[str, Any]) -> dict[str, Any] | None:
        """Per-class precision, recall, F1, support and the confusion matrix of the pass `metrics`
        (this modeler's, after an evaluation) counted; names from the data's classes."""
        from dsl.modelers._class_report import class_report

        metric = metrics.get(MACRO_F1)
        if metric is None:
            return None
        return class_report(metric.total_cm.numpy(), getattr(self.context, "class_names", None))

    def report_outputs(self, report: dict[str, Any]) -> dict[str, float]:
        """`precision_<class>`, `recall_<class>`, `f1_<class>`, `support_<class>` of each class for the
        val record (names from the data's classes), flat so a per-epoch plot reads them like any
        metric; {} above `per_class_metrics` classes."""
        rows = report["per_class"]
        if len(rows) > self.params["per_class_metrics"]:
            return {}
        keys = class_keys(len(rows), [row["name"] for row in rows])
        return {f"{value}_{key}": row[value] for value in ("precision", "recall", "f1", "support")
                for key, row in zip(keys, rows)}

    def report_warnings(self, report: dict[str, Any]) -> list[str]:
        """A model whose every prediction is one class, though the data holds several: collapsed
        (a val accuracy near one class's share says the same, less plainly)."""
        from dsl.modelers._class_report import collapsed_to

        found = collapsed_to(report)
        if found is None:
            return []
        name, count, total = found
        said = "every prediction is" if count == total else f"{count} of {total} predictions are"
        return [f"{said} class {name!r} though the data holds {sum(r['support'] > 0 for r in report['per_class'])} "
                "classes: the model has collapsed to one class (usual causes: too few training steps so far for "
                "batch-norm statistics to settle, a learning rate too high, or frozen batch-norm statistics that "
                "do not fit the data)"]

    def write_report(self, report: dict[str, Any], folder: Path, mode: str, title: str) -> dict[str, str]:
        """The confusion matrix as `confusion_matrix_<mode>.png` in `folder` (the latest evaluation of
        `mode`'s data) and as the TensorBoard image `<mode>/confusion_matrix`; none above
        `per_class_metrics` classes (a picture of hundreds of classes helps nobody)."""
        from dsl.modelers._confusion_png import confusion_png, png_summary

        rows = report["per_class"]
        if len(rows) > self.params["per_class_metrics"]:
            return {}
        path = Path(folder) / f"confusion_matrix_{mode}.png"
        confusion_png(report["confusion_matrix"], [row["name"] for row in rows], path, title)
        png_summary(path, f"{mode}/confusion_matrix")
        return {"confusion_matrix_png": str(path)}

    def predictions(self, logits: Any) -> dict[str, Any]:
        """{'classes': int32 (B,), 'probabilities': float32 (B, num_classes)}, and 'class_names':
        string (B,) when the data names its classes (an exported model then answers in names too)."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        found = {
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "probabilities": tf.nn.softmax(logits, axis=-1),
        }
        names = getattr(self.context, "class_names", None)
        if names and len(names) == logits.shape[-1]:
            found["class_names"] = tf.gather(tf.constant([str(name) for name in names]), found["classes"])
        return found

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """`{input..., "class", "probabilities"[, "name"][, "top"]}` for one input (see dsl.modelers._records)."""
        from dsl.modelers._records import class_record

        return class_record(source, predictions, options.get("top"), getattr(self.context, "class_names", None))

    def _check_top_k(self, top_k: list[int]) -> None:
        classes = getattr(self.context, "num_classes", None)
        for k in top_k:
            if classes is not None and k >= classes:
                raise DslError(
                    f"modeler.top_k: top_{k}_accuracy is always 1 with {classes} classes; "
                    f"use values below {classes}, or remove it"
                )


def check_top_k(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """modeler.top_k below the number of classes: top-k of k classes or more is always 1."""
    modeler = pipeline.get("modeler", {})
    classes = pipeline.get("inputter", {}).get("num_classes") or pipeline.get("network", {}).get("num_classes")
    found = []
    for index, k in enumerate(modeler.get("top_k") or []):
        if isinstance(classes, int) and isinstance(k, int) and k >= classes:
            path: JsonPath = ("modeler", "top_k", index)
            found.append(sources.diagnostic(
                path,
                f"top_{k}_accuracy is always 1 with {classes} classes; use values below {classes}, or remove it",
            ))
    return found


# What every classifier's registration says: `@register(kind, name, batch=...,
# description=..., **CLASSIFIER)` on a builder of ClassificationModeler declares one for a task's batch (dsl/tasks/image_classification/modeler.py).
CLASSIFIER: dict[str, Any] = {
    "rules": [checked(check_patterns)], "params": PARAMS, "outputs": outputs, "checks": [check_top_k],
    "predict_options": {"top": {"type": "integer", "minimum": 1, "default": None,
                                "help": "Only the N most probable classes in each record"}},
}
