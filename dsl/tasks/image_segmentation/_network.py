"""What the segmentation networks share: their input, the sizes they will see, the logits layer.

Pure Python at import time (the public network modules import it at their top).
"""

from __future__ import annotations

from typing import Any

from dsl.language.context import BuildContext
from dsl.language.errors import DslError


def segmentation_input(context: BuildContext, any_size: bool) -> Any:
    """The model's input, named `images`: of the inputter's image shape, or (`any_size`) of any
    height and width with its channels, so a network trained on crops predicts whole images."""
    import tensorflow as tf

    height, width, channels = tuple(context.image_shape)
    shape = (None, None, channels) if any_size else (height, width, channels)
    return tf.keras.Input(shape=shape, dtype=tf.float32, name="images")


def input_sizes(context: BuildContext) -> list[tuple[str, tuple[int, int]]]:
    """(setting, (height, width)) of every image size the network receives: the inputter's image
    shape (val, test, predict, serving) and, when the augmenter crops, its training crop."""
    sizes = [("inputter.image_shape", (int(context.image_shape[0]), int(context.image_shape[1])))]
    crop = context.fact("crop_size")
    if crop:
        sizes.append(("augmenter.crop_size", (int(crop[0]), int(crop[1]))))
    return sizes


def require_image_shape(context: BuildContext, network: str) -> None:
    """A network built for the inputter's image shape cannot take another training crop: say so."""
    (_, (height, width)), *others = input_sizes(context)
    for setting, size in others:
        if size != (height, width):
            raise DslError(
                f"{setting}: {network} is built for the inputter's image shape {height}x{width}, not "
                f"{size[0]}x{size[1]} crops; set {setting} to null (or equal to the image shape), "
                "or use network type unet, which takes crops"
            )


def logits_layer(classes: int) -> Any:
    """The 1x1 convolution to per-pixel class scores, named `logits`, float32 even under a
    mixed-precision policy (the loss and softmax need the range)."""
    import tensorflow as tf

    return tf.keras.layers.Conv2D(classes, 1, dtype="float32", name="logits")
