"""`segmentation`: random scale, crop and flip applied to an image and its mask together.

The recipe of DeepLab and the Lambda CamVid demo: scale the example by a random factor in
[min_scale, max_scale] (the image bilinearly, the mask with nearest neighbour, so a pixel
keeps a class index), pad it to at least `crop_size` (the mask with the inputter's
`ignore_label`, so padding counts in no loss nor metric), take a random `crop_size` crop
and flip it left-right at random — each geometric step moves the image and the mask
alike. Brightness and contrast jitter touch the image only. The eval path (val, test,
predict, export) applies only the deterministic normalisation, which training applies too.

crop_size and the network: the segmentation networks (`unet`, `fcn`) are fully
convolutional; `unet` takes images of any size (divisible by 2**depth), so training on
crops smaller than the eval images works; `fcn` is built for the inputter's image shape
and needs crop_size null (= the image shape). Each network says so when it is built.

Randomness is stateless, as in `cifar`: each example's seed comes from the epoch's seed and
its position, so an epoch is augmented the same way after a resume.
"""

from __future__ import annotations

from typing import Any

from dsl.augmenters.photometric import PHOTOMETRIC_PARAMS, Photometric, check_contrast
from dsl.engine.contracts import Augmenter
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem, checked
from dsl.language.sections import fixed_array

PARAMS: dict[str, dict[str, Any]] = {
    "min_scale": {
        "description": "Smallest random scale factor of an example (1 = no shrinking); below 1, crops may be padded.",
        "type": "number",
        "exclusiveMinimum": 0.0,
        "default": 0.5,
    },
    "max_scale": {
        "description": "Largest random scale factor of an example (1 = no enlarging); min_scale = max_scale = 1 turns scaling off.",
        "type": "number",
        "exclusiveMinimum": 0.0,
        "default": 2.0,
    },
    "crop_size": {
        "description": (
            "[height, width] of the random training crop; null = the inputter's image shape. Smaller crops "
            "train faster on large images (unet only: it takes any size divisible by 2**depth)."
        ),
        "anyOf": [
            {"type": "null"},
            fixed_array(
                {"type": "integer", "minimum": 1, "description": "Crop height in pixels."},
                {"type": "integer", "minimum": 1, "description": "Crop width in pixels."},
            ),
        ],
        "default": None,
    },
    "horizontal_flip": {
        "description": "Flip half of the examples left-right at random (image and mask together).",
        "type": "boolean",
        "default": True,
    },
    **PHOTOMETRIC_PARAMS,
}


class SegmentationAugmenter:
    """Joint geometric transforms of (image, mask) examples; `train` is random, `eval` deterministic.

    Args:
        params: the `augmenter` section, defaults filled.
        crop_size: (height, width) of the training crop.
        ignore_label: the mask value padding gets (None = padding never happens).
    """

    def __init__(self, params: dict[str, Any], crop_size: tuple[int, int], ignore_label: int | None) -> None:
        self.scales = (float(params["min_scale"]), float(params["max_scale"]))
        self.crop_size = crop_size
        self.ignore_label = 0 if ignore_label is None else int(ignore_label)
        self.horizontal_flip = params["horizontal_flip"]
        self.photometric = Photometric(params)

    def train(self, image: Any, mask: Any, seed: Any = None) -> tuple[Any, Any]:
        """Jitter and normalise the image, then scale, pad, crop and flip image and mask alike.
        `seed`: int64 [2] (stateless)."""
        import tensorflow as tf

        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int64)
        scale_seed, crop_seed, flip_seed, brightness_seed, contrast_seed = tf.unstack(
            tf.random.experimental.stateless_split(seed, 5))
        image = self.photometric.jitter(image, brightness_seed, contrast_seed)
        # Normalised first, so the padding (zeros) is the image's mean, not black.
        image = self.eval(image)
        image, mask = self._scaled(image, mask, scale_seed)
        return self._cropped_and_flipped(image, mask, crop_seed, flip_seed)

    def eval(self, image: Any) -> Any:
        """Per-image standardisation when enabled; otherwise the image as it is."""
        return self.photometric.normalise(image)

    def _scaled(self, image: Any, mask: Any, seed: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        if self.scales == (1.0, 1.0):
            return image, mask
        scale = tf.random.stateless_uniform([], seed, *self.scales)
        size = tf.maximum(tf.cast(tf.round(tf.cast(tf.shape(image)[:2], tf.float32) * scale), tf.int32), 1)
        image = tf.image.resize(image, size, method="bilinear")
        mask = tf.image.resize(mask[..., None], size, method="nearest")[..., 0]
        return image, mask

    def _cropped_and_flipped(self, image: Any, mask: Any, crop_seed: Any, flip_seed: Any) -> tuple[Any, Any]:
        """One tensor of image channels and the mask (offset so that padding's zeros mean
        ignore_label), padded, cropped and flipped in one go: the two cannot drift apart."""
        import tensorflow as tf

        channels = image.shape[-1]
        height, width = self.crop_size
        both = tf.concat([image, tf.cast(mask - self.ignore_label, image.dtype)[..., None]], axis=-1)
        size = tf.shape(both)
        padded = (tf.maximum(size[0], height), tf.maximum(size[1], width))
        both = tf.image.pad_to_bounding_box(both, (padded[0] - size[0]) // 2, (padded[1] - size[1]) // 2, *padded)
        both = tf.image.stateless_random_crop(both, [height, width, channels + 1], crop_seed)
        if self.horizontal_flip:
            both = tf.image.stateless_random_flip_left_right(both, flip_seed)
        image = both[..., :channels]
        mask = tf.cast(tf.round(both[..., channels]), tf.int32) + self.ignore_label
        image.set_shape([height, width, channels])
        mask.set_shape([height, width])
        return image, mask


def check_scales(p: dict[str, Any]) -> None:
    """The scale range must be a range."""
    if p["min_scale"] > p["max_scale"]:
        raise DslError(f"augmenter.min_scale: {p['min_scale']} is above max_scale {p['max_scale']}; "
                       "min_scale must be at most max_scale, e.g. 0.5 and 2.0")


def padding_rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """A crop larger than the smallest scaled image is padded with inputter.ignore_label: it must be set."""
    p = {**{name: spec["default"] for name, spec in PARAMS.items()}, **section}
    if declared.image_shape is None or declared.fact("ignore_label") is not None:
        return []
    height, width = declared.image_shape[:2]
    crop = tuple(p["crop_size"]) if p["crop_size"] else (height, width)
    if p["min_scale"] * height >= crop[0] and p["min_scale"] * width >= crop[1]:
        return []
    return [Problem(
        ("min_scale",),
        f"a crop of {crop[0]}x{crop[1]} from {height}x{width} images scaled by min_scale {p['min_scale']} must be "
        "padded, and padding takes the mask value inputter.ignore_label, which is null ({other}); set "
        "inputter.ignore_label (e.g. 255), or a min_scale and crop_size that need no padding",
        ("inputter", "ignore_label"),
    )]


@register(
    "augmenter",
    "segmentation",
    rules=[checked(check_contrast), checked(check_scales), padding_rule],
    params=PARAMS,
    batch=("image", "mask"),
    facts=lambda params: {"crop_size": params.get("crop_size")},
)
def build(params: dict[str, Any], context: BuildContext) -> Augmenter:
    """Segmentation: random scale, pad (mask: ignore_label), crop and flip of image and mask together; jitter; standardisation.

    The augmenter for the inputter's image shape and ignore_label (`context`).
    """
    p = {name: spec["default"] for name, spec in PARAMS.items()}
    p.update({key: value for key, value in params.items() if key != "type"})
    check_scales(p)
    check_contrast(p)
    height, width = tuple(context.image_shape)[:2]
    crop = tuple(p["crop_size"]) if p["crop_size"] else (height, width)
    ignore = context.fact("ignore_label")
    if ignore is None and (p["min_scale"] * height < crop[0] or p["min_scale"] * width < crop[1]):
        raise DslError(
            f"augmenter: a crop of {crop[0]}x{crop[1]} from {height}x{width} images scaled by min_scale {p['min_scale']} "
            "must be padded, and padding takes the mask value inputter.ignore_label, which is null; "
            "set inputter.ignore_label (e.g. 255), or a min_scale and crop_size that need no padding"
        )
    return SegmentationAugmenter(p, (int(crop[0]), int(crop[1])), ignore)
