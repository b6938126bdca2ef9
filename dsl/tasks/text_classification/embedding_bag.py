"""`embedding_bag`: fastText-style — the mean of the token embeddings, then logits.

Token ids -> embedding -> mean over the tokens that are not padding -> optional hidden
dense layer -> dropout -> logits. Word order is lost; with the inputter's `ngrams: 2`
word pairs are tokens of their own, which gives it back locally (fastText's bigrams).
The fastest text baseline by far.

Layer names: `embedding`, `mean`, `hidden`, `dropout`, `logits`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import NUM_CLASSES_PARAM, classifier_model
from dsl.tasks.text_classification._network import EMBEDDING_DIM_PARAM, TEXT_DROPOUT_PARAM, embedding, masked_mean, token_input

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "embedding_dim": EMBEDDING_DIM_PARAM,
    "hidden_units": {
        "description": "Units of a ReLU dense layer between the mean and the logits (0 = none: a linear model, as fastText).",
        "type": "integer",
        "minimum": 0,
        "default": 0,
    },
    "dropout": TEXT_DROPOUT_PARAM,
}


@register("network", "embedding_bag", params=PARAMS, batch=("tokens", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """fastText-style: mean of the token embeddings (padding left out), optional hidden layer, logits.

    Token ids (B, sequence_length) int32 -> logits (B, num_classes).
    """
    import tensorflow as tf

    inputs = token_input(context)
    vectors = embedding(context, params["embedding_dim"])(inputs)
    x = masked_mean()([vectors, inputs])
    if params["hidden_units"]:
        x = tf.keras.layers.Dense(params["hidden_units"], activation="relu", name="hidden")(x)
    return classifier_model(inputs, x, params, context, "embedding_bag")
