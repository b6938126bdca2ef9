"""What every network shares: the `num_classes` parameter, defaults, the input and the logits.

This module stays free of TensorFlow at import time: the public network modules import it
at their top, and `dslrun validate` imports those.

Variable names. Networks are built with the Keras functional API and every layer is named,
so a variable's name is `<layer name>/<weight>:0` (Keras 2.15), the same in every process
and every run: `stage1_block1_conv_1/kernel:0`, `stage1_block1_batch_normalization_1/gamma:0`,
`logits/bias:0`. Checkpoint patterns and the modeler's `skip_l2_loss_vars` match on these
names. Normalisation layers carry `batch_normalization` in their name (Lambda's pattern), and
their trainable weights are always called `gamma` and `beta`.
"""

from __future__ import annotations

from typing import Any

from dsl.language.context import BuildContext

NUM_CLASSES_PARAM: dict[str, Any] = {
    "description": (
        "Number of classes the network predicts; null = the number the inputter reports "
        "(give it only to insist on a value, which must then agree with the data)."
    ),
    "type": ["integer", "null"],
    "minimum": 2,
    "default": None,
}

DROPOUT_PARAM: dict[str, Any] = {
    "description": "Fraction of units dropped before each dense layer while training (0 = no dropout).",
    "type": "number",
    "minimum": 0.0,
    "exclusiveMaximum": 1.0,
    "default": 0.0,
}



def num_classes(params: dict[str, Any], context: BuildContext) -> int:
    """The network's `num_classes` when given (it wins), else the inputter's."""
    given = params.get("num_classes")
    return int(given) if given is not None else int(context.num_classes)


def image_input(context: BuildContext) -> Any:
    """The model's input: float32 images of the inputter's shape, batch size left open."""
    import tensorflow as tf

    return tf.keras.Input(shape=tuple(context.image_shape), dtype=tf.float32, name="images")


def logits_layer(classes: int, kernel_initializer: str = "glorot_uniform") -> Any:
    """The final dense layer, named `logits`: raw scores, no softmax (the modeler applies it)."""
    import tensorflow as tf

    # float32 even under a mixed-precision policy: the loss and softmax need the range.
    return tf.keras.layers.Dense(classes, kernel_initializer=kernel_initializer, dtype="float32", name="logits")


def classifier_model(inputs: Any, features: Any, params: dict[str, Any], context: BuildContext, name: str) -> Any:
    """`features` -> dropout (when `params["dropout"]`) -> `logits`, as the Keras model `name`.

    The head every classifier here ends with, named the same in each (`dropout`, `logits`), so
    that init_checkpoint and `trainable` patterns read alike whichever network they name.
    """
    import tensorflow as tf

    if params["dropout"]:
        features = tf.keras.layers.Dropout(params["dropout"], name="dropout")(features)
    return tf.keras.Model(inputs, logits_layer(num_classes(params, context))(features), name=name)
