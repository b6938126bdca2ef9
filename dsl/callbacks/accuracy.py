"""`train_accuracy` / `val_accuracy`: print the accuracy while training and after each validation."""

from __future__ import annotations

from dsl.callbacks._common import every_n_iters_param
from dsl.callbacks._reporters import TrainValueReporter, ValValueReporter
from dsl.language.registry import register


@register(
    "callback",
    "train_accuracy",
    params={
        "every_n_iters": every_n_iters_param(50, "Print the train accuracy so far in the epoch"),
    },
    reads=("train/accuracy",),
)
class TrainAccuracy(TrainValueReporter):
    """Print the train accuracy (running over the epoch) every few steps and at the end of each epoch."""

    output_name = "accuracy"


@register(
    "callback",
    "val_accuracy",
    aliases=("eval_accuracy",),  # its former name, before it matched the workflow's `val`
    params={},
    reads=("val/accuracy",),
)
class ValAccuracy(ValValueReporter):
    """Print the validation accuracy at the end of each validation phase."""

    output_name = "accuracy"
