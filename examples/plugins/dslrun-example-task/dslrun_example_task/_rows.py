"""The rows of numbers as a tf.data pipeline, for training, `dslrun predict` and the exported model.

Private and TensorFlow-importing: `csv_regression.build` imports it. The rows are few and small,
so they are held in memory as float32 arrays; `BaseInputter.examples_dataset` gives them the
order every inputter of dslrun keeps (shard, shuffle, augment, batch, prefetch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.inputters.pipeline import BaseInputter, remember_listings
from dsl.inputters.serving import ServingInput
from dsl.language.errors import DslError


class RowsInputter(BaseInputter):
    """Feature rows and targets held in memory (dsl.engine.contracts.Inputter).

    Args:
        params: the inputter section, defaults filled.
        splits: (feature rows, targets) of each declared mode.
    """

    def __init__(self, params: dict[str, Any], splits: dict[str, tuple[list[list[float]], list[float]]]) -> None:
        # Not BaseInputter.__init__: a row has no image shape nor classes.
        self.params = params
        self.num_features = len(params["feature_columns"])
        self.arrays = {mode: (np.asarray(rows, np.float32).reshape(-1, self.num_features), np.asarray(targets, np.float32))
                       for mode, (rows, targets) in splits.items()}
        remember_listings([])  # file lists of an image inputter built before this one no longer apply

    def facts(self) -> dict[str, Any]:
        return {"num_features": self.num_features}

    def num_examples(self, mode: str) -> int:
        return len(self.arrays[mode][1]) if mode in self.arrays else 0

    def dataset(self, mode: str, augment: Any = None, num_shards: Any = 1, shard_index: Any = 0,
                seed: int | tf.Tensor | None = None, batch_size: int | None = None) -> tf.data.Dataset:
        """Batches of (features float32 (B, num_features), targets float32 (B,)) for `mode`."""
        self._check_mode(mode)
        return self.examples_dataset(self.arrays[mode], mode, augment, num_shards, shard_index, seed, batch_size)

    def serving_inputs(self) -> list[Any]:
        """One input: the feature rows, columns in `feature_columns` order."""
        columns = ", ".join(self.params["feature_columns"])
        return [ServingInput("features", tf.TensorSpec([None, self.num_features], tf.float32, name="features"),
                             tf.identity, f"features: float32 [batch, {self.num_features}], columns {columns}")]

    def predict_inputs(self, paths: list[str], texts: list[str]) -> list[tuple[dict[str, Any], tf.Tensor]]:
        """Each --text as comma-separated feature values, then each row of each CSV file (its target
        column, when it has one, is not needed)."""
        from dslrun_example_task.csv_regression import csv_rows

        found: list[tuple[dict[str, Any], tf.Tensor]] = []
        for text in texts:
            try:
                row = [float(cell) for cell in text.split(",")]
            except ValueError:
                row = []
            if len(row) != self.num_features:
                raise DslError(f"--text {text!r}: expected {self.num_features} comma-separated numbers "
                               f"({', '.join(self.params['feature_columns'])})")
            found.append(({"text": text}, tf.constant(row, tf.float32)))
        for path in paths:
            for line, row, _target, problem in csv_rows(Path(path), self.params, with_target=False):
                if problem is not None:
                    raise DslError(f"{path} line {line}: {problem}")
                found.append(({"file": path, "line": line}, tf.constant(row, tf.float32)))
        return found

