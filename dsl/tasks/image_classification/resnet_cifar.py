"""`resnet_cifar`: the CIFAR ResNet of He et al. 2016 ("Deep Residual Learning", section 4.2).

Three stages of n basic blocks with 16, 32 and 64 filters on 32x32 images, depth 6n+2,
global average pooling and a dense layer of logits. This is the network of the Lambda
CIFAR-10 demo (ResNet-32), whose batch-norm settings are the defaults here.

Layer names (and so variable names) follow `stage<s>_block<b>_<layer>`, for example
`stage2_block1_conv_1/kernel:0`, `stage2_block1_batch_normalization_2/gamma:0`,
`stage2_block1_shortcut_conv/kernel:0`, then `logits/kernel:0` and `logits/bias:0`.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.networks.common import NUM_CLASSES_PARAM, image_input, logits_layer, num_classes

DEPTHS = (20, 32, 44, 56, 110)
STAGE_FILTERS = (16, 32, 64)

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "depth": {
        "description": "Number of weighted layers, 6n+2 for n blocks per stage: 20, 32, 44, 56 or 110.",
        "type": "integer",
        "enum": list(DEPTHS),
        "default": 32,
    },
    "shortcut": {
        "description": (
            "How a block that halves the image and doubles the filters adds its input: "
            "projection (1x1 convolution + batch norm, the paper's option B) or padding "
            "(subsample and pad with zero channels, option A, no extra weights)."
        ),
        "type": "string",
        "enum": ["projection", "padding"],
        "default": "projection",
    },
    "batch_norm_momentum": {
        "description": "Momentum of the batch-norm moving averages (Lambda's demo: 0.997).",
        "type": "number",
        "minimum": 0.0,
        "exclusiveMaximum": 1.0,
        "default": 0.997,
    },
    "batch_norm_epsilon": {
        "description": "Small number added to the batch variance before dividing by it (Lambda's demo: 1e-5).",
        "type": "number",
        "exclusiveMinimum": 0.0,
        "default": 1e-5,
    },
}


@register("network", "resnet_cifar", params=PARAMS, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """ResNet for 32x32 images (He et al. 2016): depth 20/32/44/56/110, 16-32-64 filters.

    The ResNet as a Keras functional model: images (B, H, W, C) -> logits (B, num_classes).
    """
    import tensorflow as tf

    blocks = (params["depth"] - 2) // 6
    inputs = image_input(context)
    x = _conv(16, 3, 1, "initial_conv")(inputs)
    x = _batch_norm(params, "initial_batch_normalization")(x)
    x = tf.keras.layers.ReLU(name="initial_relu")(x)
    for stage, filters in enumerate(STAGE_FILTERS, start=1):
        for block in range(1, blocks + 1):
            strides = 2 if stage > 1 and block == 1 else 1
            x = _basic_block(x, filters, strides, f"stage{stage}_block{block}", params)
    x = tf.keras.layers.GlobalAveragePooling2D(name="global_pool")(x)
    outputs = logits_layer(num_classes(params, context), "he_normal")(x)
    return tf.keras.Model(inputs, outputs, name=f"resnet{params['depth']}_cifar")


def _basic_block(x: Any, filters: int, strides: int, name: str, p: dict[str, Any]) -> Any:
    """conv-bn-relu-conv-bn, plus the shortcut, then relu (the paper's post-activation block)."""
    import tensorflow as tf

    y = _conv(filters, 3, strides, f"{name}_conv_1")(x)
    y = _batch_norm(p, f"{name}_batch_normalization_1")(y)
    y = tf.keras.layers.ReLU(name=f"{name}_relu_1")(y)
    y = _conv(filters, 3, 1, f"{name}_conv_2")(y)
    y = _batch_norm(p, f"{name}_batch_normalization_2")(y)
    shortcut = x
    if strides != 1 or x.shape[-1] != filters:
        shortcut = _shortcut(x, filters, strides, name, p)
    y = tf.keras.layers.Add(name=f"{name}_add")([y, shortcut])
    return tf.keras.layers.ReLU(name=f"{name}_relu_2")(y)


def _shortcut(x: Any, filters: int, strides: int, name: str, p: dict[str, Any]) -> Any:
    """Option B (projection) or option A (subsample + zero channels) of the paper."""
    if p["shortcut"] == "projection":
        x = _conv(filters, 1, strides, f"{name}_shortcut_conv")(x)
        return _batch_norm(p, f"{name}_shortcut_batch_normalization")(x)
    return _zero_pad_shortcut(x, filters, strides, f"{name}_shortcut_pad")


def _zero_pad_shortcut(x: Any, filters: int, strides: int, name: str) -> Any:
    """Option A as a frozen 1x1 convolution whose kernel is an identity padded with zeros.

    It equals `x[:, ::s, ::s, :]` followed by zero channels, but uses only standard Keras
    layers, so the model saves and loads without custom code. Its kernel is not trainable:
    no weights are learnt and no L2 penalty applies to it.
    """
    import numpy as np
    import tensorflow as tf

    channels = int(x.shape[-1])
    kernel = np.zeros((1, 1, channels, filters), dtype=np.float32)
    kernel[0, 0, :, :channels] = np.eye(channels, dtype=np.float32)
    layer = tf.keras.layers.Conv2D(
        filters,
        1,
        strides=strides,
        use_bias=False,
        kernel_initializer=tf.keras.initializers.Constant(kernel),
        trainable=False,
        name=name,
    )
    return layer(x)


def _conv(filters: int, kernel_size: int, strides: int, name: str) -> Any:
    """A bias-free convolution (the batch norm after it supplies the offset), he_normal init."""
    import tensorflow as tf

    return tf.keras.layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding="same",
        use_bias=False,
        kernel_initializer="he_normal",
        name=name,
    )


def _batch_norm(p: dict[str, Any], name: str) -> Any:
    import tensorflow as tf

    return tf.keras.layers.BatchNormalization(
        momentum=p["batch_norm_momentum"], epsilon=p["batch_norm_epsilon"], name=name
    )
