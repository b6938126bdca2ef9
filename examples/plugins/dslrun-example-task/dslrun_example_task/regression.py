"""`regression`: mean squared error (+ L2), an optimizer, a learning-rate schedule, MAE and RMSE.

What the task's modeler owns (dsl.engine.contracts.Modeler): the loss of a batch, the metrics
of each phase, the predictions of the exported model and the record `dslrun predict` prints.
The optimizer, the schedule and the L2 term are every modeler's (`BaseModeler`). Both metrics
keep a total and a count, so across ranks they are summed and computed once from the sums:
N ranks report exactly what one process reports on the same data.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Modeler
from dsl.language.context import BuildContext
from dsl.language.registry import register
from dsl.language.rules import checked
from dsl.modelers.base import TRAINING_PARAMS, BaseModeler, check_patterns

METRICS = ["mae", "rmse"]


def outputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """What each phase reports (for `dslrun validate`: `checkpoint.save_best.monitor: val/rmse`)."""
    terms = ["mean_squared_error", "l2_loss"] if params.get("weight_decay") else []
    return {"train": ["loss", *terms, *METRICS, "learning_rate"], "val": ["loss", *terms, *METRICS]}


class RegressionModeler(BaseModeler):
    """Loss, metrics, predictions and predict records of one number per example.

    Args:
        params: the `modeler` section; missing keys take their defaults.
        context: the BuildContext (`pipeline['runner']` for the run's length).
    """

    def loss_terms(self) -> list[str]:
        return ["mean_squared_error", "l2_loss"] if self.params["weight_decay"] else []

    def loss(self, targets: Any, outputs: Any, model: Any) -> dict[str, Any]:
        """{'loss': mean_squared_error + l2_loss, and each part}."""
        import tensorflow as tf

        error = tf.reduce_mean(tf.square(tf.cast(outputs, tf.float32) - tf.cast(targets, tf.float32)))
        l2_loss = self.l2_loss(model)
        return {"loss": error + l2_loss, "mean_squared_error": error, "l2_loss": l2_loss}

    def metrics(self, mode: str) -> dict[str, Any]:
        """Fresh metrics updated with `update_state(targets, outputs)`: totals and counts only."""
        import tensorflow as tf

        return {"mae": tf.keras.metrics.MeanAbsoluteError(name="mae"),
                "rmse": tf.keras.metrics.RootMeanSquaredError(name="rmse")}

    def predictions(self, outputs: Any) -> dict[str, Any]:
        import tensorflow as tf

        return {"value": tf.cast(outputs, tf.float32)}

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """`{input..., "value"}` for one input."""
        return {**source, "value": float(predictions["value"].reshape(-1)[0])}


@register("modeler", "regression", params=TRAINING_PARAMS, outputs=outputs, rules=[checked(check_patterns)],
          batch=("features", "value"))
def build(params: dict[str, Any], context: BuildContext) -> Modeler:
    """Regression: mean squared error (+ L2), optimizer, lr schedule, MAE and RMSE."""
    return RegressionModeler(params, context)
