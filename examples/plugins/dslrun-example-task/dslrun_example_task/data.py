"""`dslrun data synthetic-regression`: a CSV of numeric features and a target a small network can learn.

    dslrun data synthetic-regression --out data/rows

Each feature is drawn from a standard normal; the target is a fixed smooth function of them
(a linear part, a sine of the first feature, a product of the next two) plus Gaussian noise of
`--noise`, so a linear regression leaves an error an MLP removes. train.csv and eval.csv
(header `x1,...,xN,target`) are written with dsl.datasets.layout, dataset.json and train.csv
last, so an interrupted run is never taken for a complete one. numpy only: no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dsl.datasets import generated_set, layout, say_written


@dataclass(frozen=True)
class RegressionSpec(layout.SetSpec):
    """What to generate: `num_features` columns and the target's noise (no classes)."""

    num_features: int = 8
    noise: float = 0.1


def target(features: Any) -> Any:
    """The function the data follows: what a network learns, the noise aside."""
    import numpy as np

    weights = np.linspace(1.0, -1.0, features.shape[1])
    value = 5.0 + features @ weights + 1.5 * np.sin(2.0 * features[:, 0])
    return value + (features[:, 1] * features[:, 2] if features.shape[1] >= 3 else 0.0)


def write(out: Path, spec: RegressionSpec, force: bool) -> tuple[bool, dict[str, int]]:
    """Generate `spec` into `out` unless it holds it already (dsl.datasets.layout.write_set)."""
    import numpy as np

    def split(name: str, count: int, stream: int) -> list[list[str]]:
        random = np.random.default_rng([spec.seed, stream])
        features = random.standard_normal((count, spec.num_features))
        values = target(features) + spec.noise * random.standard_normal(count)
        return [[*map(_cell, row), _cell(value)] for row, value in zip(features, values)]

    header = [*feature_columns(spec.num_features), "target"]
    return layout.write_set(out, "synthetic-regression", spec, force, split, [], header=header)


def feature_columns(count: int) -> list[str]:
    return [f"x{index}" for index in range(1, count + 1)]


def _cell(value: float) -> str:
    return f"{value:.6g}"


@generated_set("synthetic-regression", items="rows", num_train=1000, num_val=200)
@click.option("--num-features", type=click.IntRange(min=1, max=100), default=8, show_default=True,
              help="Feature columns.")
@click.option("--noise", type=click.FloatRange(min=0), default=0.1, show_default=True,
              help="Standard deviation of the noise added to the target.")
def synthetic_regression(out: Path, num_train: int, num_val: int, num_features: int, noise: float,
                         seed: int, force: bool) -> None:
    """A small learnable regression set: numeric features and a target that depends on them smoothly."""
    spec = RegressionSpec(num_train=num_train, num_val=num_val, num_classes=0, seed=seed,
                          num_features=num_features, noise=noise)
    written, counts = write(out, spec, force)
    say_written(out, written, counts, "rows", f"{num_features} features")
    columns = ", ".join(feature_columns(num_features))
    click.echo(f"use it with: inputter: {{type: csv_regression, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, feature_columns: [{columns}]}}")
