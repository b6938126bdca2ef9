"""`train_accuracy` / `eval_accuracy`: print the accuracy while training and after each validation."""

from __future__ import annotations

from dsl.callbacks._common import every_n_iters_param
from dsl.callbacks._reporters import EvalValueReporter, TrainValueReporter
from dsl.registry import register


@register(
    "callback",
    "train_accuracy",
    params={
        "every_n_iters": every_n_iters_param(50, "Print the train accuracy so far in the epoch"),
    },
    description="Print the train accuracy (running over the epoch) every few steps and at the end of each epoch.",
    reads=("train/accuracy",),
)
class TrainAccuracy(TrainValueReporter):
    output_name = "accuracy"


@register(
    "callback",
    "eval_accuracy",
    params={},
    description="Print the validation accuracy at the end of each validation phase.",
    reads=("val/accuracy",),
)
class EvalAccuracy(EvalValueReporter):
    output_name = "accuracy"
