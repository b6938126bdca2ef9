"""`modeler.lr_schedule`: the schedules a pipeline can name, their settings, and the schedule of steps.

Shared by every modeler: a modeler lists `schedule_param()` among its parameters, fills its
section with `fill_schedule` and builds the schedule with `build_schedule`. The YAML speaks
in epochs; `build_schedule` turns them into steps once the number of train steps per epoch
is known, and hands them to the Keras schedule (`dsl.modelers._learning_rate`, imported
there, so that this module stays TensorFlow-free and `dslrun validate` can read the tables).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from dsl.language.errors import DslError
from dsl.modelers._typed import REQUIRED, KeyTable, fill_typed, typed_param

DEFAULT_SCHEDULE = "constant"

SCHEDULES: dict[str, str] = {
    "constant": "the learning rate throughout",
    "piecewise": "a factor per epoch range, from boundaries and values",
    "cosine": "cosine decay from the rate to alpha times the rate",
    "exponential": "the rate times decay_rate every decay_epochs",
    "inverse_sqrt": "after the warmup, the rate times sqrt(warmup steps / step) (the Transformer's, Vaswani et al.)",
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

_DESCRIPTION = (
    "How the learning rate changes with the epoch: a factor of optimizer.learning_rate, with an "
    "optional linear warmup."
)


def schedule_param(default_type: str = DEFAULT_SCHEDULE) -> dict[str, Any]:
    """The `lr_schedule` parameter of a modeler: its schema, and `default_type` with its defaults."""
    return typed_param("lr_schedule", _DESCRIPTION, SCHEDULES, default_type, SCHEDULE_KEYS)


def fill_schedule(config: dict[str, Any] | None, default_type: str = DEFAULT_SCHEDULE) -> dict[str, Any]:
    """`modeler.lr_schedule` with its type's defaults filled (a modeler built without the language)."""
    return fill_typed("lr_schedule", config, SCHEDULES, default_type, SCHEDULE_KEYS)


def build_schedule(
    config: dict[str, Any], base_learning_rate: float, steps_per_epoch: int | None, total_steps: int | None
) -> Any:
    """The `modeler.lr_schedule` section (defaults filled) as a schedule of optimizer steps.

    `total_steps` is the length of the whole run; a cosine schedule without `decay_epochs`
    decays over it (after the warmup).
    """
    kind = config["type"]
    to_steps = _epochs_to_steps(steps_per_epoch, kind)
    warmup_steps = to_steps(config.get("warmup_epochs") or 0, "warmup_epochs")
    if config.get("warmup_epochs") and warmup_steps == 0:
        warmup_steps = 1
    settings: dict[str, Any] = {
        "warmup_steps": warmup_steps,
        "warmup_start_factor": config.get("warmup_start_factor", 0.0),
    }
    if kind == "piecewise":
        _check_piecewise(config["boundaries"], config["values"])
        settings["boundaries"] = [to_steps(b, "boundaries") for b in config["boundaries"]]
        settings["values"] = config["values"]
    elif kind == "cosine":
        settings["decay_steps"] = _cosine_decay_steps(config, to_steps, warmup_steps, total_steps)
        settings["alpha"] = config.get("alpha", 0.0)
    elif kind == "exponential":
        settings["decay_steps"] = max(to_steps(config["decay_epochs"], "decay_epochs"), 1)
        settings["decay_rate"] = config.get("decay_rate", 0.1)
        settings["staircase"] = config.get("staircase", False)
    from dsl.modelers._learning_rate import LearningRate

    return LearningRate(base_learning_rate, kind, **settings)


def factor_at_epoch(config: dict[str, Any], epoch: float, max_epochs: int | None = None) -> float | None:
    """The schedule's factor of optimizer.learning_rate once `epoch` epochs are done, as `build_schedule`'s
    schedule gives it (to within an epoch's rounding to steps), for what `validate` can say before the
    data's length is known; None where that needs steps: in the warmup, `inverse_sqrt`."""
    kind = config.get("type", DEFAULT_SCHEDULE)
    warmup = float(config.get("warmup_epochs") or 0)
    if kind == "piecewise":
        passed = sum(1 for boundary in config.get("boundaries") or [] if epoch >= boundary)
        values = config.get("values") or [1.0]
        return float(values[passed]) if passed < len(values) and epoch >= warmup else None
    if epoch < warmup or kind == "inverse_sqrt":
        return None
    if kind == "exponential":
        if not config.get("decay_epochs"):
            return None
        exponent = (epoch - warmup) / float(config["decay_epochs"])
        return float(config.get("decay_rate", 0.1)) ** (math.floor(exponent) if config.get("staircase") else exponent)
    if kind == "cosine":
        decay = config.get("decay_epochs") or ((max_epochs - warmup) if max_epochs else None)
        if not decay or decay <= 0:
            return None
        alpha = float(config.get("alpha", 0.0))
        return alpha + (1.0 - alpha) * 0.5 * (1.0 + math.cos(math.pi * min((epoch - warmup) / float(decay), 1.0)))
    return 1.0


def describe_schedule(config: dict[str, Any]) -> str:
    """The schedule in a few words of epochs and factors, for the run's first line: a rate dropped
    by a schedule inherited from a base file was invisible there (trial B16). "" for constant."""
    kind = config.get("type", DEFAULT_SCHEDULE)
    if kind == "piecewise":
        values = [f"x{float(v):g}" for v in config.get("values") or []]
        steps = [f"{value} from epoch {boundary:g}" for boundary, value in zip(config.get("boundaries") or [], values[1:])]
        return f"schedule piecewise ({', '.join(values[:1] + steps)})"
    if kind == "cosine":
        over = f"{config['decay_epochs']:g} epochs" if config.get("decay_epochs") else "the run"
        return f"schedule cosine (to x{float(config.get('alpha', 0.0)):g} over {over})"
    if kind == "exponential":
        return f"schedule exponential (x{float(config.get('decay_rate', 0.1)):g} every {config.get('decay_epochs')} epochs)"
    return "" if kind == DEFAULT_SCHEDULE else f"schedule {kind}"


def _epochs_to_steps(steps_per_epoch: int | None, kind: str) -> Any:
    """A converter from epochs to whole steps, or a clear error when epochs have no length."""

    def to_steps(epochs: float, key: str) -> int:
        if not epochs:
            return 0
        if not steps_per_epoch:
            raise DslError(
                f"modeler.lr_schedule.{key}: the {kind} schedule is given in epochs, but the number of "
                "train steps per epoch is unknown (the inputter cannot count its train examples); "
                "use a constant schedule without warmup, or an inputter that knows its size"
            )
        return round(float(epochs) * steps_per_epoch)

    return to_steps


def _check_piecewise(boundaries: list[float], values: list[float]) -> None:
    if len(values) != len(boundaries) + 1:
        raise DslError(
            f"modeler.lr_schedule.values: a piecewise schedule with {len(boundaries)} boundaries needs "
            f"{len(boundaries) + 1} values (one factor before, between and after them), got {len(values)}"
        )
    if any(later <= earlier for earlier, later in itertools.pairwise(boundaries)):
        raise DslError(f"modeler.lr_schedule.boundaries: must be strictly increasing epochs, got {boundaries}")


def _cosine_decay_steps(config: dict[str, Any], to_steps: Any, warmup_steps: int, total_steps: int | None) -> int:
    """Steps the cosine takes from 1 to `alpha`: `decay_epochs`, or what the run has after the warmup."""
    if config.get("decay_epochs"):
        return max(int(to_steps(config["decay_epochs"], "decay_epochs")), 1)
    if not total_steps:
        raise DslError(
            "modeler.lr_schedule.decay_epochs: null means 'decay over the whole run', but the run's length "
            "in steps is unknown; set decay_epochs, or runner.max_iters"
        )
    if total_steps <= warmup_steps:
        raise DslError(
            f"modeler.lr_schedule.warmup_epochs: the warmup ({warmup_steps} steps) is as long as the whole run "
            f"({total_steps} steps), so the cosine has no steps left; shorten the warmup or set decay_epochs"
        )
    return total_steps - warmup_steps
