"""`bilstm`: a bidirectional LSTM over the embedded tokens, padding masked.

Token ids -> embedding (id 0, the padding, masked: the LSTMs skip it) -> an LSTM reading
forwards and one reading backwards, their last states concatenated -> dropout -> logits.

Layer names: `embedding`, `bidirectional` (`forward_lstm`, `backward_lstm`), `dropout`, `logits`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import NUM_CLASSES_PARAM, classifier_model
from dsl.tasks.text_classification._network import EMBEDDING_DIM_PARAM, TEXT_DROPOUT_PARAM, embedding, token_input

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "embedding_dim": EMBEDDING_DIM_PARAM,
    "units": {
        "description": "Units of each direction's LSTM (the text's feature vector is twice this).",
        "type": "integer",
        "minimum": 1,
        "default": 64,
    },
    "dropout": TEXT_DROPOUT_PARAM,
}


@register("network", "bilstm", params=PARAMS, batch=("tokens", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Bidirectional LSTM over the token embeddings (padding masked), logits from both last states.

    Token ids (B, sequence_length) int32 -> logits (B, num_classes).
    """
    import tensorflow as tf

    inputs = token_input(context)
    x = embedding(context, params["embedding_dim"], mask_zero=True)(inputs)
    x = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(params["units"], name="lstm"), name="bidirectional")(x)
    return classifier_model(inputs, x, params, context, "bilstm")
