"""`mlp`: the image flattened into a stack of dense layers — the smallest baseline.

Layer names: `flatten`, `hidden_<i>` and `dropout_<i>` (i from 1), `logits`. With
`hidden_units: []` it is a linear classifier.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import (
    DROPOUT_PARAM,
    NUM_CLASSES_PARAM,
    image_input,
    logits_layer,
    num_classes,
)

ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "elu", "swish")

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "hidden_units": {
        "description": "Units of each hidden dense layer, in order ([] = a linear classifier).",
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "default": [128],
    },
    "activation": {
        "description": "Activation function of the hidden layers.",
        "type": "string",
        "enum": list(ACTIVATIONS),
        "default": "relu",
    },
    "dropout": DROPOUT_PARAM,
}


@register("network", "mlp", params=PARAMS, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Multi-layer perceptron on the flattened image: hidden dense layers, logits.

    The MLP as a Keras functional model: images (B, H, W, C) -> logits (B, num_classes).
    """
    import tensorflow as tf

    inputs = image_input(context)
    x = tf.keras.layers.Flatten(name="flatten")(inputs)
    for index, units in enumerate(params["hidden_units"], start=1):
        x = tf.keras.layers.Dense(units, activation=params["activation"], name=f"hidden_{index}")(x)
        if params["dropout"]:
            x = tf.keras.layers.Dropout(params["dropout"], name=f"dropout_{index}")(x)
    outputs = logits_layer(num_classes(params, context))(x)
    return tf.keras.Model(inputs, outputs, name="mlp")
