"""`simple_cnn`: a few convolution + max-pool stages and a dense layer — a quick baseline.

Each entry of `filters` is one stage: a convolution (then batch norm when asked) and a
ReLU, then a 2x2 max-pool that halves the image. The features are flattened into a
dense ReLU layer and a dense layer of logits.

Layer names: `conv_<i>`, `batch_normalization_<i>`, `pool_<i>` (i from 1), `flatten`,
`dense`, `dropout`, `logits`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import DROPOUT_PARAM, NUM_CLASSES_PARAM, classifier_model, image_input

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "filters": {
        "description": "Filters of each convolution stage, in order; each stage halves the image with a max-pool.",
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "minItems": 1,
        "default": [32, 64],
    },
    "kernel_size": {
        "description": "Height and width of every convolution kernel.",
        "type": "integer",
        "minimum": 1,
        "default": 3,
    },
    "dense_units": {
        "description": "Units of the dense layer between the convolutions and the logits (0 = no such layer).",
        "type": "integer",
        "minimum": 0,
        "default": 128,
    },
    "dropout": DROPOUT_PARAM,
    "batch_norm": {
        "description": "Put batch normalisation after each convolution (the convolution then has no bias).",
        "type": "boolean",
        "default": False,
    },
}


@register("network", "simple_cnn", params=PARAMS, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Small convolutional network: conv/pool stages, a dense layer, logits.

    The CNN as a Keras functional model: images (B, H, W, C) -> logits (B, num_classes).
    """
    import tensorflow as tf

    inputs = image_input(context)
    x = inputs
    for index, filters in enumerate(params["filters"], start=1):
        x = tf.keras.layers.Conv2D(
            filters, params["kernel_size"], padding="same", use_bias=not params["batch_norm"], name=f"conv_{index}"
        )(x)
        if params["batch_norm"]:
            x = tf.keras.layers.BatchNormalization(name=f"batch_normalization_{index}")(x)
        x = tf.keras.layers.ReLU(name=f"relu_{index}")(x)
        # `same` padding keeps at least one pixel, so many stages on small images still build.
        x = tf.keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{index}")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    if params["dense_units"]:
        x = tf.keras.layers.Dense(params["dense_units"], activation="relu", name="dense")(x)
    return classifier_model(inputs, x, params, context, "simple_cnn")
