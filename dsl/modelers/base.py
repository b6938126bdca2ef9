"""What every modeler shares whatever its task: the optimizer, the learning-rate schedule, the
L2 loss on the chosen variables, and the run's length the schedule spans.

A task's modeler subclasses `BaseModeler`, adds its own parameters to `TRAINING_PARAMS`
and writes only what differs per task: `loss`, `metrics`, `predictions` and `record`
(dsl.engine.contracts.Modeler). Pure Python at import time: TensorFlow is imported inside
the methods, so `dslrun validate` reads the schema without it.
"""

from __future__ import annotations

import copy
import re
from typing import Any, ClassVar

from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.modelers._optimizers import fill_optimizer, optimizer_param
from dsl.modelers._schedules import describe_schedule as describe_schedule  # public: the run's first line
from dsl.modelers._schedules import factor_at_epoch as factor_at_epoch  # public: validate's schedule checks
from dsl.modelers._schedules import fill_schedule, schedule_param

TRAINING_PARAMS: dict[str, dict[str, Any]] = {
    "weight_decay": {
        "description": (
            "L2 coefficient: loss += weight_decay * sum(v^2)/2 over the trainable weights not "
            "matched by skip_l2_loss_vars, frozen ones included, so the loss does not depend on what is "
            "frozen (Lambda's l2_weight_decay; 0 = no L2 loss). With it, cross_entropy and l2_loss are "
            "reported beside loss."
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
    "optimizer": optimizer_param(),
    "lr_schedule": schedule_param(),
}


class BaseModeler:
    """The optimizer, schedule and L2 loss of a modeler; subclasses set `PARAMS` (theirs plus
    TRAINING_PARAMS) and add the task's loss, metrics, predictions and predict records.

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (the data's facts, and `pipeline['runner']` for the run's length).
    """

    PARAMS: ClassVar[dict[str, dict[str, Any]]] = TRAINING_PARAMS

    def __init__(self, params: dict[str, Any], context: BuildContext) -> None:
        p = {name: copy.deepcopy(spec["default"]) for name, spec in self.PARAMS.items() if "default" in spec}
        p.update({key: value for key, value in params.items() if key != "type"})
        p["optimizer"] = fill_optimizer(p["optimizer"])
        p["lr_schedule"] = fill_schedule(p["lr_schedule"])
        self.params = p
        self.context = context
        self._skip_patterns = _compile_patterns(p["skip_l2_loss_vars"])
        self._l2_cache: tuple[Any, list[Any]] | None = None

    def learning_rate(self, steps_per_epoch: int | None, scale: float = 1.0) -> Any:
        """The schedule of the optimizer step; `scale` multiplies the base rate (lr scaling)."""
        from dsl.modelers._schedules import build_schedule

        base = self.params["optimizer"]["learning_rate"] * scale
        return build_schedule(self.params["lr_schedule"], base, steps_per_epoch, self._run_steps(steps_per_epoch))

    def optimizer(self, steps_per_epoch: int | None, scale: float = 1.0, momentum: float | None = None) -> Any:
        """A fresh Keras optimizer driven by `learning_rate(steps_per_epoch, scale)`; `momentum`, when
        given, replaces the section's (asynchronous workers lower it, dsl/distributed/scaling.py)."""
        from dsl.modelers._optimizers import build_optimizer

        schedule = self.learning_rate(steps_per_epoch, scale)
        config = self.params["optimizer"] if momentum is None else {**self.params["optimizer"], "momentum": momentum}
        return build_optimizer(config, schedule, self.params["skip_l2_loss_vars"])

    def loss_terms(self) -> list[str]:
        """The parts of `loss()` the loop reports beside `loss`: the data loss and the L2 term,
        when there is one (`modeler.weight_decay` > 0)."""
        return ["cross_entropy", "l2_loss"] if self.params["weight_decay"] else []

    def l2_variables(self, model: Any) -> list[Any]:
        """The weights the L2 loss covers, chosen once per model (not per step).

        The trainable weights, and those a fine-tuning froze (init_checkpoint): the frozen ones
        add a constant (no gradient), and the loss of a checkpoint is then the same whether
        training, with its frozen backbone, or `dslrun eval`, with none, reports it. Layers a
        network builds frozen (resnet_cifar's zero-padding shortcuts) are not counted.
        """
        from dsl.networks import frozen_for_fine_tuning

        if self._l2_cache is None or self._l2_cache[0] is not model:
            candidates = list(model.trainable_variables)
            candidates += [v for v in frozen_for_fine_tuning(model) if not any(v is c for c in candidates)]
            chosen = [v for v in candidates if not any(p.search(v.name) for p in self._skip_patterns)]
            self._l2_cache = (model, chosen)
        return self._l2_cache[1]

    def l2_loss(self, model: Any) -> Any:
        """weight_decay * sum(v^2)/2 over `l2_variables` (a float32 scalar; 0 without decay)."""
        import tensorflow as tf

        decay = self.params["weight_decay"]
        variables = self.l2_variables(model) if decay else []
        if not variables:
            return tf.constant(0.0, tf.float32)
        return decay * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables])

    def _run_steps(self, steps_per_epoch: int | None) -> int | None:
        """Optimizer steps in the whole run, from `runner.max_iters` or `runner.max_epochs`."""
        pipeline = getattr(self.context, "pipeline", None)
        if pipeline is None:  # a modeler built alone knows no run length
            return None
        if pipeline.runner.max_iters:
            return int(pipeline.runner.max_iters)
        if pipeline.runner.max_epochs and steps_per_epoch:
            return int(pipeline.runner.max_epochs) * int(steps_per_epoch)
        return None

def check_patterns(params: dict[str, Any]) -> None:
    """Every skip_l2_loss_vars pattern compiles (a component rule: `dslrun validate` runs it)."""
    _compile_patterns(params.get("skip_l2_loss_vars") or [])


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

