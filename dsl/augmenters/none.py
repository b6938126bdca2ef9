"""`none`: examples reach the network as the inputter decoded them (images: floats in [0, 1]).

The augmenter a pipeline gets when it has no `augmenter` section.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Augmenter
from dsl.language.context import BuildContext
from dsl.language.registry import register


class Identity:
    """Both paths return the example unchanged, whatever its features and targets are."""

    # Lets an inputter leave out the per-example map of `train`/`eval`: a map that does
    # nothing still costs tf.data CPU per example (measured in docs/benchmarks.md).
    changes_data = False

    def train(self, features: Any, targets: Any, seed: Any = None) -> tuple[Any, Any]:
        return features, targets

    def eval(self, features: Any) -> Any:
        return features


@register("augmenter", "none", params={})
def build(params: dict[str, Any], context: BuildContext) -> Augmenter:
    """No augmentation and no normalisation: pixels in [0, 1], tokens as read."""
    return Identity()
