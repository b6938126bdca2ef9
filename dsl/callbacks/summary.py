"""`train_summary` / `val_summary`: TensorBoard scalars, and the compiled train graph once.

Events go to model_dir/tensorboard/<phase> through `runner.summary_writer(phase)`. Tags:
`train/<output>` for the values of single calls (loss, accuracy, learning_rate, ...) and
`epoch/<output>` for a whole phase, in both the train and val directories so TensorBoard
draws train and val of the same output in one chart. The x axis is the global step.
"""

from __future__ import annotations

from typing import Any

from dsl.callbacks._common import Cadence, every_n_iters_param
from dsl.engine.hooks import Callback
from dsl.language.registry import register


def write_scalars(runner: Any, mode: str, prefix: str, values: dict[str, float]) -> None:
    """One scalar per value, tagged `prefix/name`, at the global step, in `mode`'s event directory."""
    import tensorflow as tf

    with runner.summary_writer(mode).as_default(step=runner.step):
        for name, value in values.items():
            tf.summary.scalar(f"{prefix}/{name}", value)


@register(
    "callback",
    "train_summary",
    params={
        "every_n_iters": every_n_iters_param(100, "Write the train outputs to TensorBoard"),
        "graph": {
            "description": "Write the compiled train step's graph once, for TensorBoard's Graphs tab.",
            "type": "boolean",
            "default": True,
        },
    },
    unique=True,
)
class TrainSummary(Callback):
    """Write train outputs and the learning rate to TensorBoard every few steps and per epoch, and the train graph once."""

    priority = "LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self._cadence = Cadence(self.params["every_n_iters"], runner.step)
        self._graph_pending = bool(self.params["graph"])

    def after_train_iter(self, runner: Any) -> None:
        if self._graph_pending:
            self._graph_pending = False
            self._write_graph(runner)
        if self._cadence.advance(runner.step):
            write_scalars(runner, "train", "train", runner.outputs)

    def _write_graph(self, runner: Any) -> None:
        import tensorflow as tf

        graph = runner.train_graph_def()
        if graph is None:
            return
        with runner.summary_writer("train").as_default():
            tf.summary.graph(graph)

    def after_train_epoch(self, runner: Any) -> None:
        write_scalars(runner, "train", "epoch", runner.phase_outputs)
        runner.summary_writer("train").flush()

    def after_run(self, runner: Any) -> None:
        runner.summary_writer("train").flush()


@register(
    "callback",
    "val_summary",
    aliases=("eval_summary",),  # its former name, before it matched the workflow's `val`
    params={},
    unique=True,
)
class ValSummary(Callback):
    """Write the validation outputs of each validation phase to TensorBoard."""

    priority = "LOW"
    chief_only = True

    def after_val_epoch(self, runner: Any) -> None:
        write_scalars(runner, "val", "epoch", runner.phase_outputs)
        runner.summary_writer("val").flush()
