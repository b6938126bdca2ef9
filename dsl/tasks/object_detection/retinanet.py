"""`retinanet`: a single-stage anchor-based detector (Lin et al., 2017) made small.

A backbone gives features at strides 2**l; a feature pyramid (1x1 lateral convolutions,
top-down nearest upsampling and addition, a 3x3 convolution per level) brings each level
named in `anchors.levels` to `fpn_filters` channels; two heads shared by every level,
`head_convs` 3x3 convolutions each, predict per anchor the class logits (one sigmoid per
class, no background class; the bias starts at the prior probability 0.01) and the box
deltas. The output is raw, float32 (B, anchors, 4 + num_classes): the 4 box deltas
(dsl/tasks/object_detection/_box_coding.py) then the class logits, anchors in the order of
dsl/tasks/object_detection/_anchors.py. The `object_detection` modeler matches, scores and decodes them.

`head: ssd_lite` makes every convolution of both heads depthwise-separable (a 3x3 depthwise
convolution, then a 1x1 pointwise one), as SSDLite does (Sandler et al., 2018, MobileNetV2):
the same anchors and outputs at a fraction of the heads' weights and multiply-adds, for a
MobileNet backbone on a small device. It learns more slowly: the shipped pipeline on the
synthetic set (160 images, 7 epochs, seed 5) reaches mAP@0.5 0.12 with it, 0.30 without.

Backbones: `small` (the default: `base_filters` doubling at each stride-2 stage of two
3x3 convolutions with batch norm, as deep as the deepest level; resnet_cifar-sized, for
tests and small images) or a tf.keras.applications constructor (`include_top=False`,
`weights` null or a local file, levels 1..5 found by their output size).

Layer names: `stem_*`/`stage<l>_*` (small backbone), `fpn_lateral_<l>`, `fpn_output_<l>`,
`class_head_<i>`, `class_logits`, `box_head_<i>`, `box_deltas`, `detections` (with either head).
"""

from __future__ import annotations

import math
from typing import Any

from dsl.engine.contracts import Model
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import Declared, Problem
from dsl.networks import declare_head
from dsl.networks.keras_application import APPLICATIONS, has_batch_norm, load_weights, weights_path
from dsl.networks.keras_application import PARAMS as APPLICATION_PARAMS
from dsl.tasks.object_detection._anchors import ANCHORS_PARAM, anchors_of, anchors_per_position

SMALL = "small"
APPLICATION_LEVELS = 5  # tf.keras.applications backbones end at stride 32

PARAMS: dict[str, dict[str, Any]] = {
    "backbone": {
        "description": (f"{SMALL} (a small convolutional backbone, as deep as the deepest level) or a "
                        "tf.keras.applications constructor, e.g. MobileNetV2, ResNet50 (levels up to 5)."),
        "type": "string",
        "enum": [SMALL, *APPLICATIONS],
        "default": SMALL,
    },
    "weights": {
        **APPLICATION_PARAMS["weights"],
        "description": ("For a tf.keras.applications backbone: null = random initialisation, or the path of a "
                        "local weights file of it built with include_top=False. Never downloaded."),
    },
    "base_filters": {
        "description": "Filters of the small backbone's first stage; each stride-2 stage doubles them (capped at 8x).",
        "type": "integer", "minimum": 4, "default": 16,
    },
    "fpn_filters": {
        "description": "Channels of every pyramid level and of the heads' convolutions.",
        "type": "integer", "minimum": 4, "default": 64,
    },
    "head_convs": {
        "description": "3x3 convolutions (+ ReLU) of each head before its output (RetinaNet: 4).",
        "type": "integer", "minimum": 0, "default": 2,
    },
    "head": {
        "description": ("retinanet: 3x3 convolutions in the class and box heads; ssd_lite: depthwise-separable ones "
                        "(SSDLite), fewer weights and multiply-adds for the same anchors and outputs."),
        "enum": ["retinanet", "ssd_lite"], "default": "retinanet",
    },
    "anchors": ANCHORS_PARAM,
    "num_classes": {
        "description": "Object classes the network predicts; null = the inputter's num_classes.",
        "type": ["integer", "null"], "minimum": 1, "default": None,
    },
}


def check(params: dict[str, Any], image_shape: tuple[int, ...] | list[int] | None) -> list[tuple[str, str]]:
    """(setting, problem) for what the pipeline alone says is wrong with the network (dslrun validate too)."""
    anchors = anchors_of(params)
    found = []
    if len(anchors["sizes"]) != len(anchors["levels"]):
        found.append(("network.anchors.sizes", f"{len(anchors['sizes'])} sizes for {len(anchors['levels'])} levels "
                                               f"{anchors['levels']}; give one size per level"))
    backbone = params.get("backbone", SMALL)
    deepest = max(anchors["levels"])
    if backbone != SMALL and deepest > APPLICATION_LEVELS:
        found.append(("network.anchors.levels", f"level {deepest} (stride {2 ** deepest}) is deeper than the "
                                                f"{backbone} backbone's features (levels 1..{APPLICATION_LEVELS}); "
                                                "drop it or use backbone small"))
    if image_shape:
        side = max(int(image_shape[0]), int(image_shape[1]))
        largest = max(anchors["sizes"]) * max(anchors["scales"])  # side of the largest anchor's square
        if largest > side:
            found.append(("network.anchors.sizes", f"anchors up to {largest:.0f} px are larger than the "
                                                   f"{image_shape[0]}x{image_shape[1]} images (inputter.image_shape); "
                                                   "use smaller sizes or larger images"))
    return found


def anchors_fit(section: dict[str, Any], declared: Declared) -> list[Problem]:
    """`check` as a component rule (dsl.language.rules): anchors, levels and the declared image shape."""
    shape = declared.image_shape
    return [Problem(tuple(setting.split(".")[1:]), message, declared.where.get("image_shape") if "image_shape" in message else None)
            for setting, message in check(section, shape)]


@register(
    "network",
    "retinanet",
    params=PARAMS,
    batch=("image", "boxes"),
    rules=[anchors_fit],
    facts=lambda params: {"anchors": anchors_of(params)},  # the modeler encodes its targets on them
    # The small backbone normalises every convolution; an application backbone as Keras builds it.
    batch_norm=lambda params: params.get("backbone", SMALL) == SMALL or has_batch_norm(str(params["backbone"])),
)
def build(params: dict[str, Any], context: BuildContext) -> Model:
    """RetinaNet-style detector: backbone, feature pyramid, shared class and box heads per anchor.

    The detector: images (B, H, W, C) -> float32 (B, anchors, 4 + num_classes).
    """
    import tensorflow as tf

    problems = check(params, tuple(context.image_shape))
    if problems:
        raise DslError(f"{problems[0][0]}: {problems[0][1]}")
    anchors = anchors_of(params)
    classes = int(params["num_classes"]) if params["num_classes"] is not None else int(context.num_classes)
    images = tf.keras.Input(shape=tuple(context.image_shape), dtype=tf.float32, name="images")
    features = _small_backbone(images, params, max(anchors["levels"])) if params["backbone"] == SMALL else _application(images, params, context)
    pyramid = _pyramid(features, sorted(anchors["levels"]), params["fpn_filters"])
    per_position = anchors_per_position(anchors)
    class_head = _head("class_head", "class_logits", per_position * classes, params, bias=-math.log((1 - 0.01) / 0.01))
    box_head = _head("box_head", "box_deltas", per_position * 4, params, bias=0.0)
    layers = tf.keras.layers
    deltas, logits = [], []
    for level in anchors["levels"]:
        deltas.append(layers.Reshape((-1, 4), name=f"box_deltas_{level}")(box_head(pyramid[level])))
        logits.append(layers.Reshape((-1, classes), name=f"class_logits_{level}")(class_head(pyramid[level])))
    joined = [layers.Concatenate(axis=1, name=name)(parts) if len(parts) > 1 else parts[0]
              for name, parts in (("all_box_deltas", deltas), ("all_class_logits", logits))]
    outputs = layers.Concatenate(axis=-1, dtype="float32", name="detections")(joined)
    model = tf.keras.Model(images, outputs, name="retinanet")
    return declare_head(model, ["class_head"])


def _small_backbone(images: Any, p: dict[str, Any], deepest: int) -> dict[int, Any]:
    import tensorflow as tf

    layers = tf.keras.layers
    x = images
    features = {}
    for level in range(1, deepest + 1):
        filters = p["base_filters"] * 2 ** min(level - 1, 3)
        for index, stride in enumerate((2, 1)):
            name = f"stage{level}_{index + 1}"
            x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
            # Momentum 0.9: the moving statistics settle within the few hundred steps a small set trains.
            x = layers.BatchNormalization(momentum=0.9, name=f"{name}_batch_normalization")(x)
            x = layers.ReLU(name=f"{name}_relu")(x)
        features[level] = x
    return features


def _application(images: Any, p: dict[str, Any], context: BuildContext) -> dict[int, Any]:
    import tensorflow as tf

    name = p["backbone"]
    try:
        backbone = getattr(tf.keras.applications, name)(include_top=False, weights=None, input_tensor=images)
    except ValueError as exc:
        raise DslError(f"network.backbone: {name} cannot be built for images of shape {tuple(context.image_shape)}: "
                       f"{str(exc).strip().rstrip('.')}; use larger images or another backbone") from None
    weights = weights_path(p["weights"])
    if weights is not None:
        load_weights(backbone, weights)
    height, width = tuple(context.image_shape)[:2]
    features = {}
    for level in range(1, APPLICATION_LEVELS + 1):
        size = ({height // 2 ** level, math.ceil(height / 2 ** level)}, {width // 2 ** level, math.ceil(width / 2 ** level)})
        found = [layer.output for layer in backbone.layers if len(layer.output.shape) == 4
                 and layer.output.shape[1] in size[0] and layer.output.shape[2] in size[1]]
        if found:
            features[level] = found[-1]
    return features


def _pyramid(features: dict[int, Any], levels: list[int], filters: int) -> dict[int, Any]:
    """Every level of `levels` at `filters` channels, each with the coarser levels' context added."""
    import tensorflow as tf

    layers = tf.keras.layers
    missing = [level for level in levels if level not in features]
    if missing:
        raise DslError(f"network.anchors.levels: the backbone has no features at level {missing[0]} "
                       f"(stride {2 ** missing[0]}) for these images; use levels {sorted(features)}")
    pyramid: dict[int, Any] = {}
    above = None
    for level in reversed(levels):
        lateral = layers.Conv2D(filters, 1, name=f"fpn_lateral_{level}")(features[level])
        if above is not None:
            upsampled = layers.Resizing(*lateral.shape[1:3], interpolation="nearest", name=f"fpn_upsample_{level}")(above)
            lateral = layers.Add(name=f"fpn_add_{level}")([lateral, upsampled])
        above = lateral
        pyramid[level] = layers.Conv2D(filters, 3, padding="same", name=f"fpn_output_{level}")(lateral)
    return pyramid


def _head(prefix: str, output: str, channels: int, p: dict[str, Any], bias: float) -> Any:
    """A head shared by every level: `head_convs` 3x3 convolutions + ReLU, then the output convolution;
    each depthwise-separable with `head: ssd_lite`."""
    import tensorflow as tf

    layers = tf.keras.layers
    def small() -> Any:  # a new initializer per layer: one instance would give every layer the same values
        return tf.keras.initializers.RandomNormal(stddev=0.01)

    if p["head"] == "ssd_lite":  # the depthwise kernels at Keras' default scale: two 0.01 factors would vanish
        def conv(filters: int, **more: Any) -> Any:
            return layers.SeparableConv2D(filters, 3, padding="same", pointwise_initializer=small(), **more)
    else:
        def conv(filters: int, **more: Any) -> Any:
            return layers.Conv2D(filters, 3, padding="same", kernel_initializer=small(), **more)
    stack = [conv(p["fpn_filters"], activation="relu", name=f"{prefix}_{i + 1}") for i in range(p["head_convs"])]
    stack.append(conv(channels, bias_initializer=tf.keras.initializers.Constant(bias), name=output))
    return tf.keras.Sequential(stack, name=prefix)
