"""`network: {type: example_linear}`: logits straight from the flattened image.

A network is a function `build(params, context)` that returns a Keras model from the images to
the class logits, registered with its parameters' JSON Schema: `dslrun validate` checks a
pipeline against it, `dslrun list --plugin dslrun_example_network` describes it, and the engine
calls it with the parameters filled with their defaults and the facts of the data (`context`).
"""

from __future__ import annotations

from typing import Any

from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import NUM_CLASSES_PARAM, classifier_model, image_input


@register(
    "network",
    "example_linear",
    params={
        "num_classes": NUM_CLASSES_PARAM,
        "dropout": {"description": "Dropout rate on the flattened image.", "type": "number",
                    "minimum": 0, "maximum": 0.9, "default": 0.0},
    },
    batch=("image", "class"),
)
def build(params: dict[str, Any], context: BuildContext) -> Any:
    """A linear classifier on the flattened image (docs/extending.md's example plug-in).

    images (B, H, W, C) -> logits (B, classes); the head is the `logits` layer.
    """
    import tensorflow as tf

    inputs = image_input(context)
    x = tf.keras.layers.Flatten(name="flatten")(inputs)
    return classifier_model(inputs, x, params, context, "example_linear")
