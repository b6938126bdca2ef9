"""`keras_application`: any model of `tf.keras.applications`, trained from scratch or from a local file.

The model is built with its own classifier (`include_top=True`) for the pipeline's image
shape and number of classes, and `classifier_activation=None`, so it outputs logits like
every other network. Weights are never downloaded: `weights` is null (random
initialisation) or the path of a weights file on this machine, saved from the same model
with `model.save_weights` (Keras `.h5`, or a TensorFlow checkpoint prefix).

Variable names are Keras's own (e.g. `conv1_bn/gamma:0`, `predictions/bias:0`): most of
these models name their batch-norm layers `bn`, `BN` or `BatchNorm`, but every
normalisation weight is called `gamma` or `beta`, which the modeler's default
`skip_l2_loss_vars` matches. Some models (EfficientNet, EfficientNetV2, ConvNeXt, RegNet,
ResNetRS, MobileNetV3) rescale their input inside the model, expecting pixels in 0-255.
"""

from __future__ import annotations

import os
from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem, dotted
from dsl.networks.common import NUM_CLASSES_PARAM, num_classes

# The model constructors of tf.keras.applications in TensorFlow 2.15 (a test keeps this in sync).
APPLICATIONS = (
    "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtSmall", "ConvNeXtTiny", "ConvNeXtXLarge",
    "DenseNet121", "DenseNet169", "DenseNet201",
    "EfficientNetB0", "EfficientNetB1", "EfficientNetB2", "EfficientNetB3",
    "EfficientNetB4", "EfficientNetB5", "EfficientNetB6", "EfficientNetB7",
    "EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2", "EfficientNetV2B3",
    "EfficientNetV2L", "EfficientNetV2M", "EfficientNetV2S",
    "InceptionResNetV2", "InceptionV3",
    "MobileNet", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small",
    "NASNetLarge", "NASNetMobile",
    "RegNetX002", "RegNetX004", "RegNetX006", "RegNetX008", "RegNetX016", "RegNetX032",
    "RegNetX040", "RegNetX064", "RegNetX080", "RegNetX120", "RegNetX160", "RegNetX320",
    "RegNetY002", "RegNetY004", "RegNetY006", "RegNetY008", "RegNetY016", "RegNetY032",
    "RegNetY040", "RegNetY064", "RegNetY080", "RegNetY120", "RegNetY160", "RegNetY320",
    "ResNet101", "ResNet101V2", "ResNet152", "ResNet152V2", "ResNet50", "ResNet50V2",
    "ResNetRS101", "ResNetRS152", "ResNetRS200", "ResNetRS270", "ResNetRS350", "ResNetRS420", "ResNetRS50",
    "VGG16", "VGG19",
    "Xception",
)  # fmt: skip

# The smallest height and width each model accepts (tf.keras.applications' `min_size`; 32 for the others).
MIN_SIZES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}
DEFAULT_MIN_SIZE = 32


def min_size(name: str) -> int:
    """The smallest image side the application `name` can be built for."""
    return MIN_SIZES.get(name, DEFAULT_MIN_SIZE)


def too_small(name: str, key: str, declared: Declared) -> list[Problem]:
    """A problem at `key` for every image size below the application's minimum."""
    smallest = min_size(name)
    found = []
    for path, (height, width) in declared.sizes:
        if height < smallest or width < smallest:
            found.append(Problem(
                (key,),
                f"{name} needs images of at least {smallest}x{smallest}, but {dotted(path)} ({{other}}) is "
                f"{height}x{width}; use larger images or another model",
                path,
            ))
    return found


def size_rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """The model's own minimum input size (its pooling would reduce a side to nothing below it)."""
    name = section.get("name")
    return too_small(name, "name", declared) if isinstance(name, str) else []


PARAMS: dict[str, dict[str, Any]] = {
    "name": {
        "description": (
            "Model constructor of tf.keras.applications, e.g. MobileNetV2, ResNet50, EfficientNetB0 "
            "(some need images of at least 32x32, InceptionV3 and Xception 75x75 or 71x71)."
        ),
        "type": "string",
        "enum": list(APPLICATIONS),
    },
    "weights": {
        "description": (
            "null = random initialisation, or the path of a local weights file saved from the same "
            "model (model.save_weights: .h5 or a checkpoint prefix). Weights are never downloaded, "
            "so 'imagenet' is not accepted: save them to a file where there is internet and give its path."
        ),
        "type": ["string", "null"],
        "minLength": 1,
        "not": {"const": "imagenet"},
        "default": None,
    },
    "num_classes": NUM_CLASSES_PARAM,
}


def has_batch_norm(name: str) -> bool:
    """Whether the tf.keras.applications model `name` normalises batches (all but VGG's and ConvNeXt's, which
    has layer normalisation)."""
    return not name.startswith(("VGG", "ConvNeXt"))


@register(
    "network",
    "keras_application",
    params=PARAMS,
    required=("name",),
    batch_norm=lambda params: has_batch_norm(str(params.get("name"))),
    rules=[size_rule],
    batch=("image", "class"),
)
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """A tf.keras.applications model (MobileNetV2, ResNet50, ...) built for the pipeline's images.

    The application model: images (B, H, W, C) -> logits (B, num_classes), weights loaded if given.
    """
    import tensorflow as tf

    name = params["name"]
    if name not in APPLICATIONS:
        raise DslError(
            f"network.name: {name!r} is not a tf.keras.applications model; use one of {', '.join(APPLICATIONS)}"
        )
    weights = weights_path(params["weights"])
    try:
        model = getattr(tf.keras.applications, name)(
            include_top=True,
            weights=None,
            input_shape=tuple(context.image_shape),
            classes=num_classes(params, context),
            classifier_activation=None,
        )
    except ValueError as exc:
        raise DslError(
            f"network.name: {name} cannot be built for images of shape {tuple(context.image_shape)}: "
            f"{str(exc).strip().rstrip('.')}. Use larger images (the inputter's image size) or another model"
        ) from None
    if weights is not None:
        load_weights(model, weights)
    return model


def weights_path(weights: str | None) -> str | None:
    """The weights file to load, checked to exist, so a typo fails before any model is built."""
    if weights is None:
        return None
    if weights == "imagenet":
        raise DslError(
            "network.weights: 'imagenet' would download weights, which this tool never does; "
            "save them with model.save_weights where there is internet and give the file's path"
        )
    if not (os.path.exists(weights) or os.path.exists(weights + ".index")):
        raise DslError(
            f"network.weights: no weights file {weights!r} (looked for the file and for a checkpoint "
            f"{weights + '.index'!r}); give the path of a file saved with model.save_weights, or null"
        )
    return weights


def load_weights(model: Any, weights: str) -> None:
    """Load a saved file into the freshly built model; a mismatch is the user's to fix."""
    try:
        status = model.load_weights(weights)
        if hasattr(status, "assert_existing_objects_matched"):
            status.assert_existing_objects_matched()  # a checkpoint of another model restores nothing
    except (ValueError, OSError, ImportError, AssertionError) as exc:
        reason = str(exc).strip().rstrip(".")
        raise DslError(
            f"network.weights: cannot load {weights!r} into {model.name}: {reason}. The file must be saved "
            "from the same model, image shape and num_classes"
        ) from None
