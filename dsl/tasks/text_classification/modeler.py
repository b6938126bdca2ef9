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
from dsl.language.rules import checked
from dsl.modelers.base import check_patterns
from dsl.modelers.classification import PARAMS, ClassificationModeler, check_top_k, outputs


@register(
    "modeler",
    "text_classification",
    rules=[checked(check_patterns)],
    params=PARAMS,
    description="Text classification: cross-entropy (+ label smoothing, L2), optimizer, lr schedule, accuracy.",
    outputs=outputs,
    batch=("tokens", "class"),
    checks=[check_top_k],
)
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """The modeler for the resolved `modeler` section."""
    return ClassificationModeler(params, context)
