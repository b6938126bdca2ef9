"""`none`: images reach the network as the inputter decoded them, floats in [0, 1].

The augmenter a pipeline gets when it has no `augmenter` section.
"""

from __future__ import annotations

from typing import Any

from dsl.registry import register


class Identity:
    """Both paths return the image unchanged."""

    # Lets an inputter leave out the per-example map of `train`/`eval`: a map that does
    # nothing still costs tf.data CPU per example (measured in docs/benchmarks.md).
    changes_images = False

    def train(self, image: Any, seed: Any = None) -> Any:
        return image

    def eval(self, image: Any) -> Any:
        return image


@register("augmenter", "none", params={}, description="No augmentation and no normalisation: pixels in [0, 1].")
def build(params: dict[str, Any], context: Any) -> Identity:
    return Identity()
