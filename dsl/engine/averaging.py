"""The weights of the last N checkpoints averaged: what a translation run is usually exported with.

Averaging the last few checkpoints of a run (Vaswani et al. averaged the last 5 or 20, written
every 10 minutes) smooths the noise of the last steps and usually scores a little better than any
one of them, at no training cost. Every model variable is averaged, batch-norm statistics
included; the optimizer's state is not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.language.errors import DslError


def average_last(model: Any, checkpoints: list[str], count: int, option: str = "--average-last") -> list[str]:
    """Set `model`'s variables to the mean of the last `count` of `checkpoints` (oldest first);
    the checkpoints averaged. An error when the run keeps fewer."""
    import numpy as np
    import tensorflow as tf

    if count > len(checkpoints):
        raise DslError(f"{option} {count}: the run directory keeps {len(checkpoints)} training checkpoints "
                       f"({', '.join(Path(p).name for p in checkpoints) or 'none'}); average fewer, or keep more "
                       "with checkpoint.max_to_keep")
    chosen = checkpoints[-count:]
    variables = list(model.variables)
    sums = [np.zeros(v.shape, np.float64) for v in variables]
    reader = tf.train.Checkpoint(model=model)
    for path in chosen:
        reader.read(path).expect_partial()
        for total, variable in zip(sums, variables):
            total += variable.numpy()
    for total, variable in zip(sums, variables):
        variable.assign((total / len(chosen)).astype(variable.dtype.as_numpy_dtype))
    return chosen
