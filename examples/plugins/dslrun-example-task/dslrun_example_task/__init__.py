"""Tabular regression: a row of numbers in, one number out (a task of dslrun from a package of its own).

What the task tells the language of its data, before any component names it:

- its batch words: `features` (a row of numbers, `num_features` of them) and `value` (the
  number to predict), so `dslrun validate` pairs its inputter, network and modeler, and refuses
  an image network on its rows at the line;
- its fact `num_features`, which the inputter declares (the length of `feature_columns`) and the
  network reads from its build context instead of repeating it.

Then the package imports its modules, which register the components and the data set: an
in-tree task's folder is walked by dslrun, a plug-in's single entry point imports the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl.language.facts import PartSpec, register_batch_word, register_fact


def _features(facts: Callable[[str], Any]) -> PartSpec:
    return ((facts("num_features") or 1,), "float32")


register_batch_word("features", "a row of numeric features", _features)
register_batch_word("value", "one number per example", lambda facts: ((), "float32"))
register_fact("num_features", param=None, description="the numeric features of one example (a CSV row's feature columns)")

from dslrun_example_task import csv_regression, data, mlp_regressor, regression  # noqa: E402,F401  (they register)
