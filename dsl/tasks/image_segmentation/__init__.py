"""Image segmentation: an image in, a class per pixel out (CSV of image and PNG mask pairs; FCN, U-Net).

What the task declares to the language: its targets, a mask (a class per pixel), and the facts
`ignore_label` (a mask value that counts in no loss nor metric, and pads a crop) and `crop_size`
(the augmenter's training crop, which a network built for one image size must refuse).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl.language.facts import PartSpec, register_batch_word, register_fact


def _mask(facts: Callable[[str], Any]) -> PartSpec:
    height, width = tuple(facts("image_shape") or (1, 1, 1))[:2]
    return ((height, width), "int32")


register_batch_word("mask", "a class per pixel (a mask)", _mask)
register_fact("ignore_label", param="ignore_label",
              description="a mask value that counts in no loss nor metric (None: every value counts)")
register_fact("crop_size", param=None,
              description="the training crop (height, width) the augmenter takes, which the network must accept "
                          "(None: the inputter's image shape)")
