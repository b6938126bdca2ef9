"""Continuing with another number of ranks: position in examples, the schedule shifted."""

from __future__ import annotations

import pytest

from backends.horovod import _elastic_settings

tf = pytest.importorskip("tensorflow")

from dsl.engine.resize import ShiftedSchedule, batches_done, schedule_offset
from dsl.modelers._learning_rate import LearningRate


def test_position_carries_over_in_examples() -> None:
    # 2 ranks x 16 = 32 per step, 5 steps done = 160 examples; alone at 16 per step that is 10 steps.
    assert batches_done(160, 16, 32) == 10
    # Growing back: 160 examples at 32 per step = 5; a partly trained batch is trained again.
    assert batches_done(170, 32, 16) == 5
    # Never the end of the epoch: one step of it is always left to take.
    assert batches_done(512, 32, 16) == 15
    assert batches_done(0, 32, 16) == 0


def test_epoch_based_schedule_keeps_its_progress() -> None:
    # 2 ranks: 16 steps/epoch; after 3 epochs and 4 steps the optimizer counted 52 steps.
    # Alone: 32 steps/epoch, 8 steps into epoch 3 -> equivalent step 104, so shift by 52.
    assert schedule_offset(True, 3, 8, 32, 52) == 52
    assert schedule_offset(True, 3, 4, 16, 52) == 0  # unchanged world: no shift
    assert schedule_offset(False, 3, 8, 32, 52) == 0  # iteration-based runs count steps


def test_shifted_schedule_reads_the_base_schedule_ahead() -> None:
    base = LearningRate(0.1, kind="piecewise", boundaries=[100], values=[1.0, 0.1])
    shifted = ShiftedSchedule(base, 52)
    assert float(shifted(tf.constant(47, tf.int64))) == pytest.approx(0.1)  # 99 in base steps
    assert float(shifted(tf.constant(48, tf.int64))) == pytest.approx(0.01)  # 100
    assert shifted.get_config()["offset"] == 52


def test_elastic_settings_only_under_an_elastic_horovodrun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    assert _elastic_settings({"elastic": {"min_workers": 2}}) is None
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    assert _elastic_settings({"elastic": None}) == {"min_workers": 1, "max_workers": None, "commit_every_n_steps": 20}
    assert _elastic_settings({"elastic": {"min_workers": 2, "max_workers": 4, "commit_every_n_steps": 5}})["max_workers"] == 4
