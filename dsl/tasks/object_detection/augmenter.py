"""`detection`: an SSD-style random crop, a random scale and a flip that move the boxes with the pixels.

The recipe of SSD (Liu et al., 2016) for single-stage detectors, on the detection
inputters' examples (an image and its boxes padded to `max_boxes` with their count):

1. crop: a random window of `min_crop_area`..1 of the image, aspect ratio in
   `crop_aspect_ratios`, covering at least `min_coverage` of one of the boxes
   (`tf.image.stateless_sample_distorted_bounding_box`); 0 turns cropping off;
2. scale: that window zoomed by a factor in [min_scale, max_scale] about a random point;
   below 1 the image shrinks inside a canvas padded with the mean (zero after the
   normalisation), above 1 it is cropped further;
3. the window is resized back to the inputter's image shape (one `crop_and_resize`), and
   flipped left-right at random.

Boxes take the same transform, are clipped to the image, and those left with less than
`min_visible` of their area or a side under `min_box_size` pixels are dropped (the count
goes down, the kept ones move to the front). Brightness and contrast jitter touch the
pixels only. The eval path (val, test, predict, export) applies only the deterministic
normalisation. Randomness is stateless: each example's seed comes from the epoch's seed
and its position, so an epoch is augmented the same way after a resume.
"""

from __future__ import annotations

from typing import Any

from dsl.augmenters.photometric import PHOTOMETRIC_PARAMS, Photometric, check_contrast
from dsl.engine.contracts import Augmenter
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.sections import fixed_array

PARAMS: dict[str, dict[str, Any]] = {
    "min_crop_area": {
        "description": "Smallest area of the random crop, a share of the image; 1 = no cropping (SSD: 0.1 to 0.3).",
        "type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0, "default": 0.3,
    },
    "crop_aspect_ratios": {
        "description": "Range [lower, upper] of the crop's width / height (SSD: [0.5, 2]).",
        **fixed_array({"type": "number", "exclusiveMinimum": 0.0, "description": "Lowest width / height."},
                      {"type": "number", "exclusiveMinimum": 0.0, "description": "Highest width / height."}),
        "default": [0.5, 2.0],
    },
    "min_coverage": {
        "description": "Share of at least one box's area the crop must cover (SSD samples 0.1 .. 0.9); 0 = any crop.",
        "type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.5,
    },
    "min_scale": {
        "description": "Smallest random zoom of the crop (below 1 the image shrinks inside a padded canvas).",
        "type": "number", "exclusiveMinimum": 0.0, "default": 0.75,
    },
    "max_scale": {
        "description": "Largest random zoom of the crop; min_scale = max_scale = 1 turns scaling off.",
        "type": "number", "exclusiveMinimum": 0.0, "default": 1.25,
    },
    "horizontal_flip": {
        "description": "Flip half of the examples left-right at random (image and boxes together).",
        "type": "boolean", "default": True,
    },
    "min_visible": {
        "description": "A box keeps at least this share of its area inside the augmented image, or is dropped.",
        "type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.3,
    },
    "min_box_size": {
        "description": "A box left with a side under this many pixels (of the image shape) is dropped.",
        "type": "number", "minimum": 0.0, "default": 2.0,
    },
    **PHOTOMETRIC_PARAMS,
}


class DetectionAugmenter:
    """Joint geometric transforms of (image, boxes) examples; `train` is random, `eval` deterministic.

    Args:
        params: the `augmenter` section, defaults filled.
        image_shape: the inputter's image shape, which every augmented image keeps.
    """

    def __init__(self, params: dict[str, Any], image_shape: tuple[int, ...]) -> None:
        self.params = params
        self.height, self.width = int(image_shape[0]), int(image_shape[1])
        self.photometric = Photometric(params)

    def train(self, image: Any, targets: Any, seed: Any = None) -> tuple[Any, Any]:
        """Jitter and normalise the image, then crop, scale and flip image and boxes alike.
        `seed`: int64 [2] (stateless)."""
        import tensorflow as tf

        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int64)
        crop_seed, scale_seed, flip_seed, brightness_seed, contrast_seed = tf.unstack(
            tf.random.experimental.stateless_split(seed, 5))
        image = self.eval(self.photometric.jitter(image, brightness_seed, contrast_seed))
        count = tf.cast(targets["count"], tf.int32)
        window = self._zoomed(self._crop_window(targets["boxes"][:count], crop_seed), scale_seed)
        image = tf.image.crop_and_resize(image[None], window[None], [0], [self.height, self.width])[0]
        boxes = (targets["boxes"] - tf.tile(window[:2], [2])) / tf.tile(window[2:] - window[:2], [2])
        flip = tf.random.stateless_uniform([], flip_seed) < 0.5 if self.params["horizontal_flip"] else tf.constant(False)
        image = tf.cond(flip, lambda: tf.image.flip_left_right(image), lambda: image)
        boxes = tf.cond(flip, lambda: tf.stack([boxes[:, 0], 1 - boxes[:, 3], boxes[:, 2], 1 - boxes[:, 1]], axis=-1),
                        lambda: boxes)
        image.set_shape([self.height, self.width, image.shape[-1]])
        return image, self._kept(boxes, targets["classes"], count)

    def eval(self, image: Any) -> Any:
        """Per-image standardisation when enabled; otherwise the image as it is."""
        return self.photometric.normalise(image)

    def _crop_window(self, boxes: Any, seed: Any) -> Any:
        """[y_min, x_min, y_max, x_max] of the SSD crop, normalised (the whole image when cropping is off)."""
        import tensorflow as tf

        p = self.params
        if p["min_crop_area"] >= 1.0:
            return tf.constant([0.0, 0.0, 1.0, 1.0])
        _, _, window = tf.image.stateless_sample_distorted_bounding_box(
            [self.height, self.width, 1], boxes[None], seed, min_object_covered=p["min_coverage"],
            aspect_ratio_range=p["crop_aspect_ratios"], area_range=[p["min_crop_area"], 1.0], max_attempts=50,
            use_image_if_no_bounding_boxes=True)
        return tf.reshape(window, [4])

    def _zoomed(self, window: Any, seed: Any) -> Any:
        """`window` zoomed by a random factor about a random point (a larger window below 1, smaller above)."""
        import tensorflow as tf

        low, high = self.params["min_scale"], self.params["max_scale"]
        if (low, high) == (1.0, 1.0):
            return window
        scale_seed, place_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        scale = tf.random.stateless_uniform([], scale_seed, low, high)
        size = (window[2:] - window[:2]) / scale
        # The new window's offset: anywhere it still overlaps the old one as fully as it can.
        spare = (window[2:] - window[:2]) - size
        start = window[:2] + tf.random.stateless_uniform([2], place_seed) * spare
        return tf.concat([start, start + size], axis=0)

    def _kept(self, boxes: Any, classes: Any, count: Any) -> dict[str, Any]:
        """The boxes clipped to the image, the too-small ones dropped, the kept ones first."""
        import tensorflow as tf

        clipped = tf.clip_by_value(boxes, 0.0, 1.0)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        visible = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
        sides = tf.minimum((clipped[:, 2] - clipped[:, 0]) * self.height, (clipped[:, 3] - clipped[:, 1]) * self.width)
        real = tf.range(tf.shape(boxes)[0]) < count
        keep = real & (visible >= self.params["min_visible"] * area) & (sides >= self.params["min_box_size"]) & (area > 0)
        order = tf.argsort(tf.cast(~keep, tf.int32), stable=True)
        kept = tf.gather(keep, order)
        return {"boxes": tf.where(kept[:, None], tf.gather(clipped, order), 0.0),
                "classes": tf.where(kept, tf.gather(tf.cast(classes, tf.int32), order), -1),
                "count": tf.reduce_sum(tf.cast(keep, tf.int32))}


@register("augmenter", "detection", params=PARAMS, batch=("image", "boxes"))
def build(params: dict[str, Any], context: BuildContext) -> Augmenter:
    """Detection: SSD-style crop keeping boxes, random scale, flip of image and boxes together; jitter; standardisation.

    The augmenter for the inputter's image shape (`context`).
    """
    p = {name: spec["default"] for name, spec in PARAMS.items()}
    p.update({key: value for key, value in params.items() if key != "type"})
    if p["min_scale"] > p["max_scale"]:
        raise DslError(f"augmenter.min_scale: {p['min_scale']} is above max_scale {p['max_scale']}; "
                       "min_scale must be at most max_scale, e.g. 0.75 and 1.25")
    if not p["crop_aspect_ratios"][0] <= p["crop_aspect_ratios"][1]:
        raise DslError(f"augmenter.crop_aspect_ratios: lower {p['crop_aspect_ratios'][0]} is above upper "
                       f"{p['crop_aspect_ratios'][1]}, e.g. [0.5, 2.0]")
    check_contrast(p)
    return DetectionAugmenter(p, tuple(context.image_shape))
