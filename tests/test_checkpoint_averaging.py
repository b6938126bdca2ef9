"""`dslrun export --average-last N`: the mean of the last N checkpoints' weights (dsl/engine/averaging.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from dsl.engine.averaging import average_last
from dsl.language.errors import DslError


def test_the_model_gets_the_mean_of_the_last_checkpoints(tmp_path: Path) -> None:
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, name="dense")])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=10)
    saved = []
    for value in (1.0, 2.0, 4.0, 8.0):
        for variable in model.variables:
            variable.assign(tf.fill(variable.shape, value))
        saved.append(manager.save())
    chosen = average_last(model, saved, 3)
    assert chosen == saved[1:]
    for variable in model.variables:
        np.testing.assert_allclose(variable.numpy(), np.full(variable.shape, (2.0 + 4.0 + 8.0) / 3), rtol=1e-6)
    with pytest.raises(DslError, match=r"--average-last 5: the run directory keeps 4 training checkpoints .*max_to_keep"):
        average_last(model, saved, 5)
