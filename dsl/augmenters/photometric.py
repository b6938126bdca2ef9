"""What the image augmenters share: brightness and contrast jitter of the image, and the
normalisation both the train and the eval path apply.

Geometric transforms differ per task (a class moves with nothing, a mask moves with its
image); these touch the image's values only, so every image augmenter takes them as they
are here: one schema, one check, one implementation. Pure Python at import time.
"""

from __future__ import annotations

from typing import Any

from dsl.language.errors import DslError
from dsl.language.sections import fixed_array

PHOTOMETRIC_PARAMS: dict[str, dict[str, Any]] = {
    "brightness": {
        "description": "Largest random change added to every pixel of the image (pixels are in [0, 1]); 0 = off, e.g. 0.1.",
        "type": "number",
        "minimum": 0.0,
        "maximum": 1.0,
        "default": 0.0,
    },
    "contrast": {
        "description": "Random contrast factor range [lower, upper] of the image, e.g. [0.8, 1.2]; null = off.",
        "anyOf": [
            {"type": "null"},
            fixed_array(
                {"type": "number", "minimum": 0.0, "description": "Lowest contrast factor."},
                {"type": "number", "minimum": 0.0, "description": "Highest contrast factor."},
            ),
        ],
        "default": None,
    },
    "standardize": {
        "description": "Scale every image to zero mean and unit variance (train and eval alike); false = pixels stay in [0, 1].",
        "type": "boolean",
        "default": True,
    },
}


def check_contrast(params: dict[str, Any]) -> None:
    """A contrast range must be a range: lower below upper."""
    if params["contrast"] and not params["contrast"][0] < params["contrast"][1]:
        raise DslError(
            f"augmenter.contrast: lower {params['contrast'][0]} must be below upper {params['contrast'][1]}, e.g. [0.8, 1.2]"
        )


class Photometric:
    """Brightness/contrast jitter (random, stateless) and the deterministic normalisation."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.brightness = float(params["brightness"])
        self.contrast = tuple(params["contrast"]) if params["contrast"] else None
        self.standardize = params["standardize"]

    def jitter(self, image: Any, brightness_seed: Any, contrast_seed: Any) -> Any:
        """The image with random brightness and contrast, clipped back to [0, 1]."""
        import tensorflow as tf

        if self.brightness:
            image = tf.image.stateless_random_brightness(image, self.brightness, brightness_seed)
        if self.contrast:
            image = tf.image.stateless_random_contrast(image, *self.contrast, contrast_seed)
        if self.brightness or self.contrast:
            image = tf.clip_by_value(image, 0.0, 1.0)
        return image

    def normalise(self, image: Any) -> Any:
        """Per-image standardisation when enabled; otherwise the image as it is."""
        import tensorflow as tf

        return tf.image.per_image_standardization(image) if self.standardize else image
