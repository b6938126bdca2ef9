"""`text_classification`: softmax cross-entropy + L2, an optimizer, a learning-rate schedule, accuracy — for texts.

The same loss, metrics, predictions and predict records as `image_classification`
(`dsl.modelers.classification`): only the batch it declares differs, token ids and a
class, so `dslrun validate` pairs it with the text inputters and networks. A predict
record carries the input text (or its file and line) and the class, with its name when
the data names its classes.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.modelers.classification import CLASSIFIER, ClassificationModeler


@register("modeler", "text_classification", batch=("tokens", "class"), **CLASSIFIER)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Text classification: cross-entropy (+ label smoothing, L2), optimizer, lr schedule, accuracy.

    The classifier of token ids (dsl.modelers.classification).
    """
    return ClassificationModeler(params, context)
