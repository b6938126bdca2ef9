"""`cifar`: the standard CIFAR-10 recipe — pad, random crop, flip, per-image standardisation.

As in the ResNet paper and the Lambda demo: 4 pixels of zero padding on each side, a random
32x32 crop (a random shift of up to 4 pixels), a random left-right flip; optional
brightness and contrast jitter; then per-image standardisation, which the eval path (val,
test, predict, export) applies too, so the network sees the same value range everywhere.

Randomness is stateless: the inputter passes each example a seed derived from the epoch's
seed and the example's position, so an epoch is augmented the same way after a resume.
Called without a seed, the augmenter draws one from TensorFlow's global seed.
"""

from __future__ import annotations

from typing import Any

from dsl.augmenters.photometric import PHOTOMETRIC_PARAMS, Photometric, check_contrast
from dsl.engine.contracts import Augmenter
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.language.rules import checked

PARAMS: dict[str, dict[str, Any]] = {
    "padding": {
        "description": "Pixels of zero padding added on each side before the random crop (used only when crop is true).",
        "type": "integer",
        "minimum": 0,
        "default": 4,
    },
    "crop": {
        "description": "Randomly crop the padded image back to its size: a random shift of up to `padding` pixels.",
        "type": "boolean",
        "default": True,
    },
    "horizontal_flip": {
        "description": (
            "Flip half of the images left-right at random. On by default, as suits natural images "
            "(CIFAR-10); wrong for digits and text-like images, where a mirror image is another or no "
            "symbol (a mirrored 2 or b): set false for those."
        ),
        "type": "boolean",
        "default": True,
    },
    **PHOTOMETRIC_PARAMS,
}


class CifarAugmenter:
    """Per-example transforms of (image, class) examples; `train` is random, `eval` is deterministic.

    The transforms move the image only: for targets that are images too (segmentation
    masks) use the `segmentation` augmenter, which moves both.
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self.padding = params["padding"] if params["crop"] else 0
        self.horizontal_flip = params["horizontal_flip"]
        self.photometric = Photometric(params)

    def train(self, image: Any, label: Any, seed: Any = None) -> tuple[Any, Any]:
        """Random crop / flip / jitter, then the eval normalisation; the label as it is.
        `seed`: int64 [2] (stateless)."""
        import tensorflow as tf

        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int64)
        crop_seed, flip_seed, brightness_seed, contrast_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
        if self.padding:
            shape = image.shape
            size = shape.as_list() if shape.is_fully_defined() else tf.shape(image)
            pad = self.padding
            padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
            image = tf.image.stateless_random_crop(padded, size, crop_seed)
            image.set_shape(shape)
        if self.horizontal_flip:
            image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        image = self.photometric.jitter(image, brightness_seed, contrast_seed)
        return self.eval(image), label

    def eval(self, image: Any) -> Any:
        """Per-image standardisation when enabled; otherwise the image as it is."""
        return self.photometric.normalise(image)


@register("augmenter", "cifar", rules=[checked(check_contrast)], params=PARAMS, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Augmenter:
    """CIFAR recipe: zero-pad, random crop, random flip, optional brightness/contrast, per-image standardisation."""
    p = {name: spec["default"] for name, spec in PARAMS.items()}
    p.update({key: value for key, value in params.items() if key != "type"})
    check_contrast(p)
    return CifarAugmenter(p)
