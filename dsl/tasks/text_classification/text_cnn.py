"""`text_cnn`: Kim (2014)'s convolutional sentence classifier.

Token ids -> embedding -> for each filter size, a 1-D convolution (ReLU) and the maximum
over time of each filter -> the maxima of all sizes concatenated -> dropout -> logits. A
filter of size 3 learns a three-word pattern wherever it occurs, so phrases and negations
("not good") are seen, not only single words.

Layer names: `embedding`, `conv_<size>`, `pool_<size>`, `concatenate`, `dropout`, `logits`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem, dotted
from dsl.networks.common import NUM_CLASSES_PARAM, classifier_model
from dsl.tasks.text_classification._network import EMBEDDING_DIM_PARAM, TEXT_DROPOUT_PARAM, embedding, token_input

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "embedding_dim": EMBEDDING_DIM_PARAM,
    "filter_sizes": {
        "description": "Window sizes in tokens, one convolution each (Kim 2014: [3, 4, 5]).",
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "minItems": 1,
        "uniqueItems": True,
        "default": [3, 4, 5],
    },
    "num_filters": {
        "description": "Filters of each convolution.",
        "type": "integer",
        "minimum": 1,
        "default": 100,
    },
    "dropout": {**TEXT_DROPOUT_PARAM, "default": 0.5},
}


def width_rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """No filter wider than a text: its convolution would have no position to look at."""
    length = declared.sequence_length
    sizes = section.get("filter_sizes") or PARAMS["filter_sizes"]["default"]
    if length is None:
        return []
    at = declared.where["sequence_length"]
    return [Problem(
        ("filter_sizes", index),
        f"a filter of {size} tokens is wider than the {length} tokens of a text ({dotted(at)}, {{other}}); "
        f"use sizes up to {length}, or a longer {dotted(at)}",
        at,
    ) for index, size in enumerate(sizes) if size > length]


@register("network", "text_cnn", rules=[width_rule], params=PARAMS, batch=("tokens", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Kim (2014) text CNN: embedding, convolutions of several widths, max over time, logits.

    Token ids (B, sequence_length) int32 -> logits (B, num_classes).
    """
    import tensorflow as tf

    inputs = token_input(context)
    too_wide = [size for size in params["filter_sizes"] if size > context.sequence_length]
    if too_wide:
        raise DslError(f"network.filter_sizes: {too_wide[0]} is wider than the {context.sequence_length} tokens of a text; "
                       "use smaller sizes or a longer inputter.sequence_length")
    vectors = embedding(context, params["embedding_dim"])(inputs)
    pooled = []
    for size in params["filter_sizes"]:
        x = tf.keras.layers.Conv1D(params["num_filters"], size, activation="relu", name=f"conv_{size}")(vectors)
        pooled.append(tf.keras.layers.GlobalMaxPooling1D(name=f"pool_{size}")(x))
    x = pooled[0] if len(pooled) == 1 else tf.keras.layers.Concatenate(name="concatenate")(pooled)
    return classifier_model(inputs, x, params, context, "text_cnn")
