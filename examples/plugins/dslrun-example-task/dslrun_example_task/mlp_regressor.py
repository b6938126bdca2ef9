"""`mlp_regressor`: a stack of dense layers from a row of features to one number.

Layer names: `hidden_<i>` and `dropout_<i>` (i from 1), `value`. With `hidden_units: []` it is
a linear regression. The row's length is the data's fact `num_features`, which the inputter
reports: the network's section never repeats it.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register

PARAMS: dict[str, dict[str, Any]] = {
    "hidden_units": {
        "description": "Units of each hidden dense layer, in order ([] = a linear regression).",
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "default": [64, 64],
    },
    "activation": {
        "description": "Activation function of the hidden layers.",
        "type": "string",
        "enum": ["relu", "gelu", "tanh", "swish"],
        "default": "relu",
    },
    "dropout": {
        "description": "Dropout rate after each hidden layer (0 = none).",
        "type": "number",
        "minimum": 0,
        "maximum": 0.9,
        "default": 0.0,
    },
}


@register("network", "mlp_regressor", params=PARAMS, batch=("features", "value"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """Multi-layer perceptron from a row of numeric features to one number (regression).

    features (B, num_features) -> values (B,).
    """
    import tensorflow as tf

    inputs = tf.keras.Input(shape=(int(context.fact("num_features", 1)),), name="features")
    x = inputs
    for index, units in enumerate(params["hidden_units"], start=1):
        x = tf.keras.layers.Dense(units, activation=params["activation"], name=f"hidden_{index}")(x)
        if params["dropout"]:
            x = tf.keras.layers.Dropout(params["dropout"], name=f"dropout_{index}")(x)
    value = tf.keras.layers.Dense(1, name="value")(x)
    outputs = tf.keras.layers.Reshape((), name="squeeze")(value)
    return tf.keras.Model(inputs, outputs, name="mlp_regressor")
