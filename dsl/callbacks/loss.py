"""`train_loss` / `val_loss`: print the loss while training and after each validation."""

from __future__ import annotations

from dsl.callbacks._common import every_n_iters_param
from dsl.callbacks._reporters import TrainValueReporter, ValValueReporter
from dsl.language.registry import register


@register(
    "callback",
    "train_loss",
    params={
        "every_n_iters": every_n_iters_param(50, "Print the mean train loss of the last steps"),
    },
    reads=("train/loss",),
)
class TrainLoss(TrainValueReporter):
    """Print the train loss (mean since the last line) every few steps and the epoch's mean loss.

    The loss of single steps is noisy; the mean since the last line is what a reader can compare.
    """

    output_name = "loss"
    windowed = True


@register(
    "callback",
    "val_loss",
    aliases=("eval_loss",),  # its former name, before it matched the workflow's `val`
    params={},
    reads=("val/loss",),
)
class ValLoss(ValValueReporter):
    """Print the mean validation loss at the end of each validation phase."""

    output_name = "loss"
