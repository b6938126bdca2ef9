"""What an image inputter gives the exported model: its serving inputs.

- `images`: float32 pixels [batch, H, W, C] in [0, 1], the shape the pipeline trained on,
  for clients that decode images themselves.
- `image_bytes`: the encoded files (PNG, JPEG, GIF, BMP), a string per image, as TF Serving
  clients send them (`{"b64": ...}` in its REST API: the input name ends in `_bytes`).
  Decoding, channel conversion and resizing happen in the graph, with the function the
  inputters and `dslrun predict` use, so a file gets the same prediction whichever way it
  comes in.

Imports TensorFlow: private to the inputters, imported inside their methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf


@dataclass
class ServingInput:
    """One serving input (dsl.engine.contracts.ServingInput)."""

    name: str
    spec: tf.TensorSpec
    to_features: Callable[[tf.Tensor], tf.Tensor]
    description: str
    keep: list[Any] = field(default_factory=list)


def image_inputs(image_shape: tuple[int, int, int],
                 decode_image: Callable[[tf.Tensor, tuple[int, int, int]], tf.Tensor]) -> list[ServingInput]:
    """`images` (pixels, the default) and `image_bytes` (files `decode_image` decodes) for `image_shape`."""
    height, width, channels = image_shape
    pixels = tf.TensorSpec([*image_shape], tf.float32)

    def decoded(image_bytes: tf.Tensor) -> tf.Tensor:
        return tf.map_fn(lambda data: decode_image(data, image_shape), image_bytes, fn_output_signature=pixels)

    return [
        ServingInput("images", tf.TensorSpec([None, *image_shape], tf.float32, name="images"), tf.identity,
                     f"images: float32 [batch, {height}, {width}, {channels}], values in [0, 1]"),
        ServingInput("image_bytes", tf.TensorSpec([None], tf.string, name="image_bytes"), decoded,
                     f"image_bytes: string [batch], encoded PNG/JPEG/BMP/GIF files of any size and channels, "
                     f"decoded to {height}x{width}x{channels} in the graph"),
    ]
