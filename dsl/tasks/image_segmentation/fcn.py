"""`fcn`: a fully convolutional network (Long et al., 2015) on a tf.keras.applications backbone.

The backbone's classifier is left out (`include_top=False`); a 1x1 convolution scores the
classes on its last feature map (stride 32). With `output_stride` 16 (FCN-16s) the scores,
upsampled bilinearly, are added to scores of the backbone's last stride-16 features, and
with 8 (FCN-8s) to those of its last stride-8 features too; the sum is upsampled
bilinearly to the input's size: logits (B, H, W, num_classes).

The backbone is built for the inputter's image shape (the stride-8/16 layers are found by
their output size), so training crops must be that size (`augmenter.crop_size` null).
Weights are never downloaded: `weights` is null (random initialisation) or a local file
saved from the same backbone built with `include_top=False` (model.save_weights). Some
backbones (EfficientNet, ConvNeXt, RegNet, ResNetRS, MobileNetV3) rescale their input
inside the model, expecting pixels in 0-255.

Layer names: the backbone's own (Keras's), then `score_32`, `score_16`, `score_8`,
`upsample_32`, `upsample_16`, `fuse_16`, `fuse_8`, `upsample_logits`, `logits`.
"""

from __future__ import annotations

import math
from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem, dotted
from dsl.networks import declare_head
from dsl.networks.common import NUM_CLASSES_PARAM, num_classes
from dsl.networks.keras_application import APPLICATIONS, has_batch_norm, load_weights, too_small, weights_path
from dsl.networks.keras_application import PARAMS as APPLICATION_PARAMS
from dsl.tasks.image_segmentation._network import require_image_shape, segmentation_input

PARAMS: dict[str, dict[str, Any]] = {
    "backbone": {
        **APPLICATION_PARAMS["name"],
        "description": (
            "Model constructor of tf.keras.applications used as the encoder, e.g. MobileNetV2, ResNet50, VGG16 "
            "(most need images of at least 32x32)."
        ),
        "default": "MobileNetV2",
    },
    "weights": {
        **APPLICATION_PARAMS["weights"],
        "description": (
            "null = random initialisation, or the path of a local weights file of the backbone built with "
            "include_top=False (model.save_weights: .h5 or a checkpoint prefix). Never downloaded."
        ),
    },
    "output_stride": {
        "description": "Finest backbone stride whose features feed the scores: 32 (FCN-32s), 16 (FCN-16s) or 8 (FCN-8s).",
        "enum": [8, 16, 32],
        "default": 8,
    },
    "num_classes": NUM_CLASSES_PARAM,
}


def sizes_rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """The backbone's minimum size, features at the output stride, and no other training crop:
    the FCN is built for the inputter's image shape."""
    backbone = section.get("backbone", PARAMS["backbone"]["default"])
    found = too_small(backbone, "backbone", declared) if isinstance(backbone, str) else []
    if not declared.sizes:
        return found
    (image_at, (height, width)), *crops = declared.sizes
    stride = section.get("output_stride", PARAMS["output_stride"]["default"])
    if not found and stride < 32 and (height < 32 or width < 32):
        found.append(Problem(
            ("output_stride",),
            f"FCN-{stride}s takes the backbone's features at stride {stride}, which {height}x{width} images "
            f"({dotted(image_at)}, {{other}}) do not have; use images of at least 32x32 or output_stride 32",
            image_at,
        ))
    for crop_at, size in crops:
        if size != (height, width):
            found.append(Problem(
                ("type",),
                f"fcn is built for the inputter's image shape {height}x{width}, not the {size[0]}x{size[1]} "
                f"crops of {dotted(crop_at)} ({{other}}); set {dotted(crop_at)}: null (or equal to the image "
                "shape), or use network type unet, which takes crops",
                crop_at,
            ))
    return found


@register(
    "network",
    "fcn",
    rules=[sizes_rule],
    params=PARAMS,
    batch_norm=lambda params: has_batch_norm(str(params.get("backbone", PARAMS["backbone"]["default"]))),
    batch=("image", "mask"),
)
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """FCN-8s/16s/32s on a tf.keras.applications backbone: skip scores, bilinear upsampling, per-pixel logits.

    The FCN as a Keras functional model: images (B, H, W, C) -> logits (B, H, W, num_classes).
    """
    import tensorflow as tf

    require_image_shape(context, "fcn")
    backbone = _backbone(params, context)
    height, width = tuple(context.image_shape)[:2]
    classes = num_classes(params, context)
    layers = tf.keras.layers
    scores = layers.Conv2D(classes, 1, dtype="float32", name="score_32")(backbone.output)
    for stride in (16, 8):
        if stride < params["output_stride"]:
            break
        features = _features_at(backbone, stride, height, width)
        skip = layers.Conv2D(classes, 1, dtype="float32", name=f"score_{stride}")(features)
        upsampled = layers.Resizing(*skip.shape[1:3], interpolation="bilinear", dtype="float32",
                                    name=f"upsample_{stride * 2}")(scores)
        scores = layers.Add(dtype="float32", name=f"fuse_{stride}")([upsampled, skip])
    scores = layers.Resizing(height, width, interpolation="bilinear", dtype="float32", name="upsample_logits")(scores)
    outputs = layers.Activation("linear", dtype="float32", name="logits")(scores)
    model = tf.keras.Model(backbone.input, outputs, name=f"fcn_{params['output_stride']}s")
    # The class scores at every stride depend on the classes: they are the head together.
    return declare_head(model, [layer.name for layer in model.layers if layer.name.startswith("score_")])


def _backbone(p: dict[str, Any], context: BuildContext) -> Any:
    import tensorflow as tf

    name = p["backbone"]
    if name not in APPLICATIONS:
        raise DslError(f"network.backbone: {name!r} is not a tf.keras.applications model; use one of {', '.join(APPLICATIONS)}")
    weights = weights_path(p["weights"])
    try:
        backbone = getattr(tf.keras.applications, name)(
            include_top=False, weights=None, input_tensor=segmentation_input(context, any_size=False))
    except ValueError as exc:
        raise DslError(
            f"network.backbone: {name} cannot be built for images of shape {tuple(context.image_shape)}: "
            f"{str(exc).strip().rstrip('.')}. Use larger images (the inputter's image size) or another backbone"
        ) from None
    if weights is not None:
        load_weights(backbone, weights)
    return backbone


def _features_at(backbone: Any, stride: int, height: int, width: int) -> Any:
    """The output of the backbone's last layer at `stride` (of the image's size, rounded either way)."""
    heights = {height // stride, math.ceil(height / stride)}
    widths = {width // stride, math.ceil(width / stride)}
    found = [layer.output for layer in backbone.layers
             if len(layer.output.shape) == 4 and layer.output.shape[1] in heights and layer.output.shape[2] in widths]
    if not found or height < 32 or width < 32:
        raise DslError(
            f"network.output_stride: no features of {backbone.name} at stride {stride} for {height}x{width} images; "
            "use images of at least 32x32 or output_stride 32"
        )
    return found[-1]
