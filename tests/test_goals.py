"""`auto` means the same direction for save_best, early_stopping and a sweep's goal: a score is
better high (detection's mAP and per-class AP included), a loss low. Trial A13's save_best and
sweep minimised `val/map` and kept the worst checkpoint and trial, without a word."""

from __future__ import annotations

import pytest

from dsl.callbacks._monitor import Monitor
from dsl.language.goals import better
from dsl.sweep.plan import SweepPlan


@pytest.mark.parametrize(("output", "goal"), [
    ("val/map", "max"), ("val/map_50", "max"), ("val/map_75", "max"), ("val/ap_zero", "max"), ("val/ap_3", "max"),
    ("val/bleu", "max"), ("val/accuracy", "max"), ("val/top_5_accuracy", "max"), ("val/mean_iou", "max"),
    ("val/macro_f1", "max"), ("val/auc", "max"),
    ("val/loss", "min"), ("train/loss", "min"), ("val/box_loss", "min"), ("val/class_loss", "min"),
    ("val/giou_loss", "min"), ("val/perplexity", "min"),
])
def test_auto_is_one_direction_for_every_setting(output: str, goal: str) -> None:
    assert better(output) == goal
    assert Monitor(output, "auto", "checkpoint.save_best.monitor").mode == goal
    pipeline = {"name": "p", "sweep": {"metric": output, "goal": "auto", "parameters": {}}}
    assert SweepPlan.read("p.yaml", (), pipeline).goal == goal


def test_a_stated_direction_wins() -> None:
    assert Monitor("val/map", "min", "early_stopping.monitor").mode == "min"
