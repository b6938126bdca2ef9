"""`image_classification`: softmax cross-entropy + L2, an optimizer, a learning-rate schedule, accuracy.

The modeler is what TF Model Garden calls a Task: the network says what the model is, the
modeler says what it learns and how. The loop calls exactly the methods of
`dsl.engine.contracts.Modeler`; TensorFlow is imported inside them, never when the module is imported.

A classifier's loss, metrics, predictions and predict records are the same whatever it
classifies: they are `dsl.modelers.classification.ClassificationModeler`, which
`text_classification` shares. This module declares the type for images; what every
modeler shares (optimizer, lr_schedule, weight_decay) is `dsl.modelers.base.BaseModeler`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.modelers.classification import CLASSIFIER, PARAMS, ClassificationModeler, metric_names, outputs

__all__ = ["PARAMS", "build", "metric_names", "outputs"]


@register("modeler", "image_classification", batch=("image", "class"), **CLASSIFIER)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Image classification: cross-entropy (+ label smoothing, L2), optimizer, lr schedule, accuracy.

    The classifier of images (dsl.modelers.classification).
    """
    return ClassificationModeler(params, context)
