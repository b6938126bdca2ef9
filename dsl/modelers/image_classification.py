"""`image_classification`: softmax cross-entropy + L2, an optimizer, a learning-rate schedule, accuracy.

The modeler is what TF Model Garden calls a Task: the network says what the model is, the
modeler says what it learns and how. The loop calls exactly the methods of
`dsl.interfaces.Modeler`; TensorFlow is imported inside them (and by the private helpers
`_optimizers` and `_schedules`), never when the module is imported.

`optimizer` and `lr_schedule` are objects whose `type` decides which other keys they take:
the schema rejects a key that means nothing for the chosen type (`momentum` on adam,
`boundaries` on cosine), and each type has its own defaults.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from dsl.errors import DslError
from dsl.registry import register

REQUIRED = "<required>"  # in a defaults table: the key must be given for that type

# key -> (its schema, {each type that takes the key: the default for that type}).
KeyTable = dict[str, tuple[dict[str, Any], dict[str, Any]]]

OPTIMIZERS: dict[str, str] = {
    "sgd": "plain gradient descent",
    "momentum": "gradient descent with momentum",
    "nesterov": "gradient descent with Nesterov momentum",
    "adam": "Adam",
    "adamw": "Adam with decoupled weight decay",
    "rmsprop": "RMSprop",
}

_UNIT = {"type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0}
_SGD_LIKE, _ADAM_LIKE = ("sgd", "momentum", "nesterov"), ("adam", "adamw")

OPTIMIZER_KEYS: KeyTable = {
    "learning_rate": (
        {
            "description": (
                "Base learning rate, before the schedule's factor and the backend's scaling "
                "(default 0.1 for sgd, momentum and nesterov; 0.001 for adam, adamw and rmsprop)."
            ),
            "type": "number",
            "exclusiveMinimum": 0.0,
        },
        {**dict.fromkeys(_SGD_LIKE, 0.1), **dict.fromkeys((*_ADAM_LIKE, "rmsprop"), 0.001)},
    ),
    "momentum": (
        {"description": "Momentum of the update (default 0.9; rmsprop: 0.0).", **_UNIT},
        {"momentum": 0.9, "nesterov": 0.9, "rmsprop": 0.0},
    ),
    "beta_1": (
        {"description": "Decay rate of the running mean of gradients (adam, adamw).", **_UNIT},
        dict.fromkeys(_ADAM_LIKE, 0.9),
    ),
    "beta_2": (
        {"description": "Decay rate of the running mean of squared gradients (adam, adamw).", **_UNIT},
        dict.fromkeys(_ADAM_LIKE, 0.999),
    ),
    "epsilon": (
        {
            "description": "Small constant added to the denominator for stability (adam, adamw, rmsprop).",
            "type": "number",
            "exclusiveMinimum": 0.0,
        },
        dict.fromkeys((*_ADAM_LIKE, "rmsprop"), 1e-7),
    ),
    "rho": (
        {"description": "Decay rate of the running mean of squared gradients (rmsprop).", **_UNIT},
        {"rmsprop": 0.9},
    ),
    "weight_decay": (
        {
            "description": (
                "AdamW's decoupled weight decay (times the learning rate, each step); it skips the "
                "variables matched by skip_l2_loss_vars (adamw only)."
            ),
            "type": "number",
            "minimum": 0.0,
        },
        {"adamw": 0.004},
    ),
    "clipnorm": (
        {
            "description": "Clip each variable's gradient to this L2 norm before the update; null = no clipping.",
            "type": ["number", "null"],
            "exclusiveMinimum": 0.0,
        },
        dict.fromkeys(OPTIMIZERS, None),
    ),
}

SCHEDULES: dict[str, str] = {
    "constant": "the learning rate throughout",
    "piecewise": "a factor per epoch range, from boundaries and values",
    "cosine": "cosine decay from the rate to alpha times the rate",
    "exponential": "the rate times decay_rate every decay_epochs",
}

SCHEDULE_KEYS: KeyTable = {
    "boundaries": (
        {
            "description": (
                "Epochs after which the factor moves to the next entry of values, strictly "
                "increasing, e.g. [91, 136, 182] (piecewise)."
            ),
            "type": "array",
            "items": {"type": "number", "minimum": 0},
        },
        {"piecewise": REQUIRED},
    ),
    "values": (
        {
            "description": (
                "Factors of optimizer.learning_rate, one more than boundaries: before the first "
                "boundary, then after each, e.g. [1.0, 0.1, 0.01, 0.001] (piecewise)."
            ),
            "type": "array",
            "items": {"type": "number", "minimum": 0},
            "minItems": 1,
        },
        {"piecewise": REQUIRED},
    ),
    "decay_epochs": (
        {
            "description": (
                "cosine: epochs to decay from the rate to alpha times it, after the warmup (null = "
                "the rest of the run); exponential: epochs per multiplication by decay_rate (required)."
            ),
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
        },
        {"cosine": None, "exponential": REQUIRED},
    ),
    "alpha": (
        {"description": "Factor of the learning rate where the cosine ends (cosine).", "type": "number",
         "minimum": 0.0, "maximum": 1.0},
        {"cosine": 0.0},
    ),
    "decay_rate": (
        {"description": "Factor applied to the rate every decay_epochs (exponential).", "type": "number",
         "exclusiveMinimum": 0.0},
        {"exponential": 0.1},
    ),
    "staircase": (
        {"description": "Decay in whole steps every decay_epochs instead of smoothly (exponential).",
         "type": "boolean"},
        {"exponential": False},
    ),
    "warmup_epochs": (
        {
            "description": (
                "Epochs (may be fractional) over which the rate rises linearly from warmup_start_factor "
                "times the rate to the rate; piecewise boundaries still count from the start of training, "
                "cosine and exponential decay begins when the warmup ends."
            ),
            "type": "number",
            "minimum": 0,
        },
        dict.fromkeys(SCHEDULES, 0),
    ),
    "warmup_start_factor": (
        {"description": "Factor of the learning rate at the first warmup step.", "type": "number",
         "minimum": 0.0, "maximum": 1.0},
        dict.fromkeys(SCHEDULES, 0.0),
    ),
}  # fmt: skip


def _typed_object_schema(
    description: str, types: dict[str, str], default_type: str, keys: KeyTable
) -> dict[str, Any]:
    """JSON Schema of an object whose `type` decides its other keys (one if/then per type).

    The shared `properties` list every key (for editors and the catalogue) with a default
    only where it is the same for every type; each type's `then` lists the keys it takes
    with that type's defaults and rejects the others as unknown keys.
    """
    type_schema = {
        "description": "Which one: " + "; ".join(f"{name} = {text}" for name, text in types.items()) + ".",
        "type": "string",
        "enum": list(types),
        "default": default_type,
    }
    properties: dict[str, Any] = {"type": type_schema}
    for key, (schema, defaults) in keys.items():
        properties[key] = dict(schema)
        if set(defaults) == set(types) and len({repr(value) for value in defaults.values()}) == 1:
            properties[key]["default"] = copy.deepcopy(next(iter(defaults.values())))
    branches = []
    for name, text in types.items():
        condition: dict[str, Any] = {"properties": {"type": {"const": name}}}
        if name != default_type:
            condition["required"] = ["type"]  # no `type` means the default type
        branches.append({"if": condition, "then": _type_branch(name, text, keys)})
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "additionalProperties": False,
        "allOf": branches,
    }


def _type_branch(name: str, text: str, keys: KeyTable) -> dict[str, Any]:
    """The keys type `name` takes, with its defaults (or required), and no other key."""
    properties: dict[str, Any] = {"type": {"description": f"{name}: {text}.", "const": name}}
    required = []
    for key, (schema, defaults) in keys.items():
        if name not in defaults:
            continue
        properties[key] = dict(schema)
        if defaults[name] == REQUIRED:
            required.append(key)
            if isinstance(schema.get("type"), list):  # a required key is never null
                properties[key]["type"] = [t for t in schema["type"] if t != "null"]
        else:
            properties[key]["default"] = copy.deepcopy(defaults[name])
    branch: dict[str, Any] = {"properties": properties, "additionalProperties": False}
    if required:
        branch["required"] = required
    return branch


def fill_typed(
    section: str, config: dict[str, Any] | None, types: dict[str, str], default_type: str, keys: KeyTable
) -> dict[str, Any]:
    """`modeler.<section>` with its type's defaults filled.

    The language has already validated and filled it; this repeats the rules so that the
    modeler built directly (tests, notebooks) is held to them too.
    """
    config = dict(config or {})
    kind = config.get("type", default_type)
    if kind not in types:
        raise DslError(f"modeler.{section}.type: unknown {section} {kind!r}; use one of {', '.join(types)}")
    takes = [key for key, (_, defaults) in keys.items() if kind in defaults]
    for key in config:
        if key != "type" and key not in takes:
            raise DslError(
                f"modeler.{section}.{key}: not a setting of the {kind} {section}; it takes: {', '.join(takes)}"
            )
    filled: dict[str, Any] = {"type": kind}
    for key in takes:
        default = keys[key][1][kind]
        if key not in config and default == REQUIRED:
            raise DslError(f"modeler.{section}.{key}: required by the {kind} {section}; add it")
        filled[key] = config[key] if key in config else copy.deepcopy(default)
    return filled


PARAMS: dict[str, dict[str, Any]] = {
    "label_smoothing": {
        "description": "Share of each label's probability spread evenly over all classes (0 = one-hot labels).",
        "type": "number",
        "minimum": 0.0,
        "exclusiveMaximum": 1.0,
        "default": 0.0,
    },
    "weight_decay": {
        "description": (
            "L2 coefficient: loss += weight_decay * sum(v^2)/2 over the trainable variables not "
            "matched by skip_l2_loss_vars (Lambda's l2_weight_decay; 0 = no L2 loss)."
        ),
        "type": "number",
        "minimum": 0.0,
        "default": 0.0,
    },
    "skip_l2_loss_vars": {
        "description": (
            "Regular expressions searched in each variable's name (e.g. 'conv1_bn/gamma:0', "
            "'logits/bias:0'); matching variables get no L2 loss nor AdamW decay. The default skips "
            "every normalisation scale (gamma) and offset (beta) and every bias, whatever the layer's name; "
            "Lambda's [batch_normalization, bias] does the same for this project's networks only."
        ),
        "type": "array",
        "items": {"type": "string", "format": "regex", "minLength": 1},
        "default": ["gamma", "beta", "bias"],
    },
    "top_k": {
        "description": "Extra top-k accuracies to report, e.g. [5] adds top_5_accuracy (each k at least 2).",
        "type": "array",
        "items": {"type": "integer", "minimum": 2},
        "uniqueItems": True,
        "default": [],
    },
    "optimizer": {
        **_typed_object_schema("The optimizer and its settings.", OPTIMIZERS, "momentum", OPTIMIZER_KEYS),
        "default": fill_typed("optimizer", {}, OPTIMIZERS, "momentum", OPTIMIZER_KEYS),
    },
    "lr_schedule": {
        **_typed_object_schema(
            "How the learning rate changes with the epoch: a factor of optimizer.learning_rate, with an "
            "optional linear warmup.",
            SCHEDULES,
            "constant",
            SCHEDULE_KEYS,
        ),
        "default": fill_typed("lr_schedule", {}, SCHEDULES, "constant", SCHEDULE_KEYS),
    },
}


def metric_names(top_k: list[int]) -> list[str]:
    """The metrics `metrics()` returns, by name: accuracy, then each top-k accuracy."""
    return ["accuracy", *(f"top_{k}_accuracy" for k in top_k)]


def outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """What each phase reports with this modeler (the loop adds its own `loss` mean and the
    optimizer's `learning_rate`, both the modeler's to define), for `dslrun validate`."""
    metrics = ["loss", *metric_names(params.get("top_k") or [])]
    return {"train": [*metrics, "learning_rate"], "val": metrics}


@register(
    "modeler",
    "image_classification",
    params=PARAMS,
    description="Image classification: cross-entropy (+ label smoothing, L2), optimizer, lr schedule, accuracy.",
    outputs=outputs,
)
def build(params: dict[str, Any], context: Any) -> ImageClassificationModeler:
    """The modeler for the resolved `modeler` section."""
    return ImageClassificationModeler(params, context)


class ImageClassificationModeler:
    """Loss, optimizer, schedule, metrics and predictions of a classifier (dsl.interfaces.Modeler).

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`num_classes`, and `pipeline['runner']` for the run's length).
    """

    def __init__(self, params: dict[str, Any], context: Any) -> None:
        p = {name: copy.deepcopy(spec["default"]) for name, spec in PARAMS.items()}
        p.update({key: value for key, value in params.items() if key != "type"})
        p["optimizer"] = fill_typed("optimizer", p["optimizer"], OPTIMIZERS, "momentum", OPTIMIZER_KEYS)
        p["lr_schedule"] = fill_typed("lr_schedule", p["lr_schedule"], SCHEDULES, "constant", SCHEDULE_KEYS)
        self.params = p
        self.context = context
        self._skip_patterns = _compile_patterns(p["skip_l2_loss_vars"])
        self._check_top_k(p["top_k"])
        self._l2_cache: tuple[Any, list[Any]] | None = None

    def learning_rate(self, steps_per_epoch: int | None, scale: float = 1.0) -> Any:
        """The schedule of the optimizer step; `scale` multiplies the base rate (lr scaling)."""
        from dsl.modelers._schedules import build_schedule

        base = self.params["optimizer"]["learning_rate"] * scale
        return build_schedule(self.params["lr_schedule"], base, steps_per_epoch, self._run_steps(steps_per_epoch))

    def optimizer(self, steps_per_epoch: int | None, scale: float = 1.0) -> Any:
        """A fresh Keras optimizer driven by `learning_rate(steps_per_epoch, scale)`."""
        from dsl.modelers._optimizers import build_optimizer

        schedule = self.learning_rate(steps_per_epoch, scale)
        return build_optimizer(self.params["optimizer"], schedule, self.params["skip_l2_loss_vars"])

    def loss(self, labels: Any, logits: Any, model: Any) -> dict[str, Any]:
        """{'loss': cross_entropy + l2_loss, 'cross_entropy': batch mean, 'l2_loss': weighted L2 term}."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
        smoothing = self.params["label_smoothing"]
        if smoothing:
            one_hot = tf.one_hot(labels, depth=logits.shape[-1], dtype=tf.float32)
            per_example = tf.keras.losses.categorical_crossentropy(
                one_hot, logits, from_logits=True, label_smoothing=smoothing
            )
        else:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        cross_entropy = tf.reduce_mean(per_example)
        l2_loss = self._l2_loss(model)
        return {"loss": cross_entropy + l2_loss, "cross_entropy": cross_entropy, "l2_loss": l2_loss}

    def l2_variables(self, model: Any) -> list[Any]:
        """The trainable variables the L2 loss covers, chosen once per model (not per step)."""
        if self._l2_cache is None or self._l2_cache[0] is not model:
            chosen = [
                v for v in model.trainable_variables if not any(p.search(v.name) for p in self._skip_patterns)
            ]
            self._l2_cache = (model, chosen)
        return self._l2_cache[1]

    def metrics(self, mode: str) -> dict[str, Any]:
        """Fresh metrics, updated with `update_state(labels, logits)`: accuracy and each top-k."""
        import tensorflow as tf

        accuracy, *top_names = metric_names(self.params["top_k"])
        metrics = {accuracy: tf.keras.metrics.SparseCategoricalAccuracy(name=accuracy)}
        for k, name in zip(self.params["top_k"], top_names):
            metrics[name] = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=k, name=name)
        return metrics

    def predictions(self, logits: Any) -> dict[str, Any]:
        """{'classes': int32 (B,), 'probabilities': float32 (B, num_classes)}."""
        import tensorflow as tf

        logits = tf.cast(logits, tf.float32)
        return {
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "probabilities": tf.nn.softmax(logits, axis=-1),
        }

    def _l2_loss(self, model: Any) -> Any:
        import tensorflow as tf

        decay = self.params["weight_decay"]
        variables = self.l2_variables(model) if decay else []
        if not variables:
            return tf.constant(0.0, tf.float32)
        return decay * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables])

    def _run_steps(self, steps_per_epoch: int | None) -> int | None:
        """Optimizer steps in the whole run, from `runner.max_iters` or `runner.max_epochs`."""
        runner = (getattr(self.context, "pipeline", None) or {}).get("runner") or {}
        if runner.get("max_iters"):
            return int(runner["max_iters"])
        if runner.get("max_epochs") and steps_per_epoch:
            return int(runner["max_epochs"]) * int(steps_per_epoch)
        return None

    def _check_top_k(self, top_k: list[int]) -> None:
        classes = getattr(self.context, "num_classes", None)
        for k in top_k:
            if classes is not None and k >= classes:
                raise DslError(
                    f"modeler.top_k: top_{k}_accuracy is always 1 with {classes} classes; "
                    f"use values below {classes}, or remove it"
                )


def _compile_patterns(patterns: list[str]) -> list[re.Pattern[str]]:
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise DslError(
                f"modeler.skip_l2_loss_vars[{index}]: {pattern!r} is not a regular expression ({exc}); "
                "escape special characters with a backslash"
            ) from None
    return compiled
