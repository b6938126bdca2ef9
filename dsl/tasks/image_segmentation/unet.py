"""`unet`: the U-Net of Ronneberger et al. (2015) — an encoder, a decoder, and skips between them.

Each of the `depth` encoder levels is two 3x3 convolutions (then batch norm when asked)
with ReLU, then a 2x2 max-pool that halves the image; filters start at `base_filters` and
double per level. A bottleneck of two convolutions (and dropout) follows; each decoder
level doubles the image with a 2x2 transposed convolution, concatenates the encoder's
features of that size and applies two convolutions. A 1x1 convolution gives the logits
(B, H, W, num_classes) at the input's resolution.

Fully convolutional: the model takes images of any height and width divisible by 2**depth,
so it can train on `augmenter.crop_size` crops and predict whole images; the build checks
both sizes.

Layer names: `encoder_<i>_conv_<j>`, `encoder_<i>_batch_normalization_<j>`, `encoder_<i>_relu_<j>`,
`encoder_<i>_pool`, `bottleneck_conv_<j>`..., `bottleneck_dropout`, `decoder_<i>_upsample`,
`decoder_<i>_concat`, `decoder_<i>_conv_<j>`..., `logits` (i from 1, the level; j 1 or 2).
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem, dotted
from dsl.networks.common import NUM_CLASSES_PARAM, num_classes
from dsl.tasks.image_segmentation._network import input_sizes, logits_layer, segmentation_input

PARAMS: dict[str, dict[str, Any]] = {
    "num_classes": NUM_CLASSES_PARAM,
    "depth": {
        "description": "Encoder levels, each halving the image (the image's height and width must be divisible by 2**depth).",
        "type": "integer",
        "minimum": 1,
        "maximum": 8,
        "default": 4,
    },
    "base_filters": {
        "description": "Filters of the first level's convolutions; each level below doubles them.",
        "type": "integer",
        "minimum": 1,
        "default": 32,
    },
    "batch_norm": {
        "description": "Put batch normalisation after each convolution (the convolution then has no bias).",
        "type": "boolean",
        "default": True,
    },
    "dropout": {
        "description": "Fraction of the bottleneck's features dropped while training (0 = no dropout).",
        "type": "number",
        "minimum": 0.0,
        "exclusiveMaximum": 1.0,
        "default": 0.0,
    },
}


def sizes_rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """Every image size the network sees (the inputter's, the augmenter's crop) halves `depth`
    times without a remainder: the decoder's upsampled features must meet the encoder's."""
    depth = section.get("depth", PARAMS["depth"]["default"])
    factor = 2**depth
    found = []
    for path, (height, width) in declared.sizes:
        if height % factor or width % factor:
            fit = (max(factor, height // factor * factor), max(factor, width // factor * factor))
            found.append(Problem(
                ("depth",),
                f"unet halves the image {depth} times, so its height and width must be divisible by "
                f"2**{depth} = {factor}, but {dotted(path)} ({{other}}) is {height}x{width}; use e.g. "
                f"{fit[0]}x{fit[1]} or a lower network.depth",
                path,
            ))
    return found


@register("network", "unet", rules=[sizes_rule], params=PARAMS, batch=("image", "mask"))
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """U-Net: conv/pool encoder, transposed-conv decoder with skip connections, per-pixel logits.

    The U-Net as a Keras functional model: images (B, H, W, C) -> logits (B, H, W, num_classes).
    """
    import tensorflow as tf

    _check_sizes(params["depth"], context)
    layers = tf.keras.layers
    inputs = segmentation_input(context, any_size=True)
    x, skips = inputs, []
    for level in range(1, params["depth"] + 1):
        x = _conv_pair(x, params["base_filters"] * 2 ** (level - 1), params["batch_norm"], f"encoder_{level}")
        skips.append(x)
        x = layers.MaxPooling2D(2, name=f"encoder_{level}_pool")(x)
    x = _conv_pair(x, params["base_filters"] * 2 ** params["depth"], params["batch_norm"], "bottleneck")
    if params["dropout"]:
        x = layers.Dropout(params["dropout"], name="bottleneck_dropout")(x)
    for level in range(params["depth"], 0, -1):
        filters = params["base_filters"] * 2 ** (level - 1)
        x = layers.Conv2DTranspose(filters, 2, strides=2, name=f"decoder_{level}_upsample")(x)
        x = layers.Concatenate(name=f"decoder_{level}_concat")([skips[level - 1], x])
        x = _conv_pair(x, filters, params["batch_norm"], f"decoder_{level}")
    outputs = logits_layer(num_classes(params, context))(x)
    return tf.keras.Model(inputs, outputs, name="unet")


def _conv_pair(x: Any, filters: int, batch_norm: bool, prefix: str) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    for index in (1, 2):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=not batch_norm, name=f"{prefix}_conv_{index}")(x)
        if batch_norm:
            x = layers.BatchNormalization(name=f"{prefix}_batch_normalization_{index}")(x)
        x = layers.ReLU(name=f"{prefix}_relu_{index}")(x)
    return x


def _check_sizes(depth: int, context: BuildContext) -> None:
    """Every image size the network will see halves `depth` times without a remainder."""
    factor = 2**depth
    for setting, (height, width) in input_sizes(context):
        if height % factor or width % factor:
            fit = (max(factor, height // factor * factor), max(factor, width // factor * factor))
            raise DslError(
                f"network.depth: unet halves the image {depth} times, so its height and width must be divisible "
                f"by 2**{depth} = {factor}, but {setting} is {height}x{width}; use e.g. {fit[0]}x{fit[1]} "
                "or a lower network.depth"
            )
