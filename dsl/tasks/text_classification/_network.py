"""What the text networks share: the token input, the embedding, and the mean over real tokens.

TensorFlow-free at import time (the public network modules import it at their top);
TensorFlow is imported inside the functions.
"""

from __future__ import annotations

from typing import Any

from dsl.language.context import BuildContext
from dsl.language.errors import DslError

EMBEDDING_DIM_PARAM: dict[str, Any] = {
    "description": "Size of each token's embedding vector.",
    "type": "integer",
    "minimum": 1,
    "default": 64,
}

TEXT_DROPOUT_PARAM: dict[str, Any] = {
    "description": "Fraction of features dropped before the logits while training (0 = no dropout).",
    "type": "number",
    "minimum": 0.0,
    "exclusiveMaximum": 1.0,
    "default": 0.0,
}


def token_input(context: BuildContext) -> Any:
    """The model's input: int32 token ids (B, sequence_length) of the inputter's vocabulary."""
    import tensorflow as tf

    vocabulary_size(context)
    return tf.keras.Input(shape=(context.sequence_length,), dtype=tf.int32, name="tokens")


def vocabulary_size(context: BuildContext) -> int:
    """Token ids are below it: the inputter's vocabulary size, or an error when the data is not text."""
    size = getattr(context, "vocabulary_size", None)
    if size is None or getattr(context, "sequence_length", None) is None:
        raise DslError("this network reads token ids, but the inputter reports no vocabulary; "
                       "use a text inputter (text_classification_csv, text_folder)")
    return int(size)


def embedding(context: BuildContext, dim: int, mask_zero: bool = False) -> Any:
    """One `dim`-vector per token id, named `embedding`; with `mask_zero`, padding (id 0) is masked."""
    import tensorflow as tf

    return tf.keras.layers.Embedding(vocabulary_size(context), dim, mask_zero=mask_zero, name="embedding")


def masked_mean(name: str = "mean") -> Any:
    """A layer of [embeddings, token ids]: the mean of (B, T, D) embeddings over the tokens whose id is not 0 (padding).

    Keras' GlobalAveragePooling1D divides by the number of unmasked tokens, which is 0 for
    an empty text (a NaN); this divides by at least 1, so an empty text gives zeros.
    """
    import tensorflow as tf

    class MaskedMean(tf.keras.layers.Layer):
        def call(self, inputs: Any) -> Any:
            vectors, tokens = inputs
            weights = tf.cast(tf.not_equal(tokens, 0), vectors.dtype)[..., None]
            total = tf.reduce_sum(vectors * weights, axis=1)
            return total / tf.maximum(tf.reduce_sum(weights, axis=1), tf.cast(1, vectors.dtype))

    return MaskedMean(name=name)
