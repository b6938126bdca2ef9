"""The shared loop, in process: graphs traced once, hooks in priority order, workflows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dsl.engine.callback_list import POINTS, CallbackList
from dsl.engine.hooks import Callback
from dsl.language.pipeline import load_resolved

pytestmark = pytest.mark.slow

PIPELINE = """\
version: 1
name: engine
seed: 1
inputter:
  type: synthetic
  num_examples: {{train: 80, val: 24, test: 8}}
  image_shape: [8, 8, 3]
  num_classes: 3
  batch_size: 16
network: {{type: mlp, hidden_units: [16]}}
modeler:
  type: image_classification
  optimizer: {{type: sgd, learning_rate: 0.1}}
runner:
  model_dir: {run}
  workflow: {workflow}
  {limit}
  steps_per_call: {steps_per_call}
"""


def make_runner(tmp_path: Path, workflow: str = "[[train, 1], [val, 1]]", limit: str = "max_epochs: 2",
                steps_per_call: int = 2) -> Any:
    from dsl.commands._training import build_runner

    path = tmp_path / "engine.yaml"
    path.write_text(PIPELINE.format(run=tmp_path / "run", workflow=workflow, limit=limit,
                                    steps_per_call=steps_per_call))
    return build_runner(load_resolved(path), resume=False)


@pytest.fixture
def float32_afterwards() -> Any:
    """Keras' precision policy is process-wide: put float32 back for the tests that follow."""
    yield
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("float32")


class Recorder(Callback):
    """Records every hook point it sees, tagged with its name."""

    def __init__(self, tag: str, log: list, priority: str | int = "NORMAL") -> None:
        super().__init__({"type": tag})
        self.tag, self.log, self.priority = tag, log, priority

    def before_train_epoch(self, runner: Any) -> None:
        self.log.append((self.tag, "before_train_epoch", runner.step))

    def after_train_iter(self, runner: Any) -> None:
        self.log.append((self.tag, "after_train_iter", runner.step))

    def after_val_epoch(self, runner: Any) -> None:
        self.log.append((self.tag, "after_val_epoch", runner.step))


def test_a_second_epoch_and_a_short_last_call_do_not_retrace(tmp_path: Path) -> None:
    # 80 examples / 16 = 5 steps per epoch, 2 per call: calls of 2, 2 and 1 steps.
    runner = make_runner(tmp_path, limit="max_epochs: 3")
    assert runner.run() == 0
    assert runner.step == 15 and runner.epoch == 3
    assert dict(runner.traces) == {"train": 1, "val": 1}


def test_one_step_per_call_compiles_no_graph_loop_and_trains_as_the_loop_does(tmp_path: Path) -> None:
    """steps_per_call 1 (the default) drops the tf.range loop around the step, which cost 8 % of a
    3.5 ms text step; the weights after the same steps are those of calls of 2 steps."""
    def loops(runner: Any) -> int:
        graph = runner.train_graph_def()
        ops = [node.op for node in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
        return sum(op in ("While", "StatelessWhile") for op in ops)

    runs = {}
    for per_call in (1, 2):
        (tmp_path / str(per_call)).mkdir()
        runner = make_runner(tmp_path / str(per_call), limit="max_epochs: 2", steps_per_call=per_call)
        assert runner.run() == 0 and runner.step == 10 and runner.traces["train"] == 1
        runs[per_call] = runner
    assert loops(runs[1]) == 0 and loops(runs[2]) >= 1
    for one, two in zip(runs[1].model.get_weights(), runs[2].model.get_weights()):
        np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-6)


def test_hooks_run_by_priority_then_list_order(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, limit="max_epochs: 1")
    log: list = []
    runner.callback_list = CallbackList([Recorder("low", log, "LOW"), Recorder("first-normal", log),
                                         Recorder("highest", log, "HIGHEST"), Recorder("second-normal", log)])
    assert runner.run() == 0
    first_iter = [tag for tag, point, step in log if point == "after_train_iter" and step == 2]
    assert first_iter == ["highest", "first-normal", "second-normal", "low"]


class EveryPoint(Callback):
    """Records each hook point by its name, overriding none: the defaults fall through to
    the mode-independent methods, which record nothing, so the points are seen here."""

    def __init__(self, log: list) -> None:
        super().__init__({"type": "every_point"})
        self.log = log

    def __getattribute__(self, name: str) -> Any:
        if name in POINTS:
            log = object.__getattribute__(self, "log")
            return lambda runner: log.append(name)
        return object.__getattribute__(self, name)


def test_every_declared_hook_point_is_called_in_run_order(tmp_path: Path) -> None:
    declared = {name for name in vars(Callback) if name.startswith(("before_", "after_"))}
    declared -= {"before_save_checkpoint", "after_load_checkpoint"}  # state, not hook points
    declared -= {"before_epoch", "after_epoch", "before_iter", "after_iter"}  # what the points fall through to
    assert declared == set(POINTS)
    runner = make_runner(tmp_path, limit="max_epochs: 1")
    log: list = []
    runner.callback_list = CallbackList([EveryPoint(log)])
    assert runner.run() == 0
    assert set(log) == set(POINTS)
    assert log[0] == "before_run" and log[-1] == "after_run"
    val = [point for point in log if "_val_" in point]
    assert val == ["before_val_epoch", "before_val_iter", "after_val_iter", "after_val_epoch"]
    first_train = log.index("before_train_epoch")
    assert log[first_train:first_train + 3] == ["before_train_epoch", "before_train_iter", "after_train_iter"]


def test_iter_based_workflow_validates_every_n_steps(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, workflow="[[train, 4], [val, 1]]", limit="max_iters: 10", steps_per_call=3)
    log: list = []
    runner.callback_list = CallbackList([Recorder("r", log)])
    assert runner.run() == 0
    assert runner.step == 10
    assert [step for _, point, step in log if point == "after_val_epoch"] == [4, 8, 10]
    # Calls cross neither a phase boundary (4, 8) nor a data epoch's end (5): 3+1, 1+3, 2.
    assert [step for _, point, step in log if point == "after_train_iter"] == [3, 4, 5, 8, 10]
    # 10 steps crossed the 5-step data epoch twice.
    assert runner.epoch == 2


def test_metrics_are_reset_each_phase(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, limit="max_epochs: 2")
    assert runner.run() == 0
    train = [h for h in runner.history if h["mode"] == "train"]
    assert len(train) == 2 and all(0.0 <= h["accuracy"] <= 1.0 for h in train)
    assert runner.metrics["train"]["loss"].count.numpy() == 5  # the second epoch's steps only


def test_entering_a_larger_world_reshards_and_shifts_the_schedule(tmp_path: Path) -> None:
    from dsl.engine.resize import ShiftedSchedule

    runner = make_runner(tmp_path, limit="max_epochs: 1")
    assert runner.run() == 0 and runner.step == 5  # one rank: 80 / 16 = 5 steps per epoch
    # A second rank joined (Horovod elastic): 80 / 2 / 16 = 2 steps per epoch of 32 examples.
    runner.placement.world_size = 2
    runner.enter_world(step=7, epoch=1, epoch_examples=32)
    assert (runner.steps_per_epoch, runner.global_batch_size) == (2, 32)
    assert (runner.step, runner.epoch, runner.data_position) == (7, 1, 1)
    assert runner.context.steps_per_epoch == 2
    # Epoch 1 + 1 step at 2 steps per epoch is step 3 of the new world; the optimizer counted 5.
    schedule = runner.optimizer._learning_rate  # Keras keeps the schedule here (learning_rate is its value)
    assert isinstance(schedule, ShiftedSchedule) and schedule.offset == 3 - 5
    assert runner.position() == {"step": 7, "epoch": 1, "epoch_examples": 32}


def test_elastic_settings_do_nothing_on_one_process(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runner = make_runner(tmp_path, limit="max_epochs: 1\n  elastic: {min_workers: 1}")
    assert runner.run() == 0
    assert "runner.elastic has no effect on the local backend" in capsys.readouterr().err


def test_mixed_bfloat16_computes_in_bfloat16_and_keeps_float32_weights(tmp_path: Path, float32_afterwards: None) -> None:
    import math

    import tensorflow as tf

    (tmp_path / "bf16").mkdir()
    (tmp_path / "fp32").mkdir()
    runner = make_runner(tmp_path / "bf16", limit="max_epochs: 2\n  precision: mixed_bfloat16")
    hidden = [layer for layer in runner.model.layers if isinstance(layer, tf.keras.layers.Dense)]
    assert hidden[0].compute_dtype == "bfloat16"
    assert hidden[-1].compute_dtype == "float32"  # the logits layer: the loss sees float32
    assert all(variable.dtype == tf.float32 for variable in runner.model.variables)
    assert runner.run() == 0
    losses = [record["loss"] for record in runner.history if record["mode"] == "train"]
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    # The Keras policy is process-wide: the next float32 pipeline is float32 again.
    again = make_runner(tmp_path / "fp32", limit="max_epochs: 1")
    assert all(layer.compute_dtype == "float32" for layer in again.model.layers
               if isinstance(layer, tf.keras.layers.Dense))


def test_mixed_float16_scales_the_loss_and_checkpoints_the_scale(tmp_path: Path, float32_afterwards: None) -> None:
    import math

    import tensorflow as tf

    from dsl.engine.precision import loss_scale_variables

    runner = make_runner(tmp_path, limit="max_epochs: 2\n  precision: mixed_float16")
    hidden = [layer for layer in runner.model.layers if isinstance(layer, tf.keras.layers.Dense)]
    assert hidden[0].compute_dtype == "float16" and hidden[-1].compute_dtype == "float32"
    assert isinstance(runner.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
    scale, good_steps = loss_scale_variables(runner.optimizer)
    assert {scale.name, good_steps.name} == {"current_loss_scale:0", "good_steps:0"}
    assert all(any(v is w for w in runner.state_variables()) for v in (scale, good_steps))
    assert runner.run() == 0
    losses = [record["loss"] for record in runner.history if record["mode"] == "train"]
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    assert int(good_steps.numpy()) == runner.step == 10  # every step's gradients were finite
    assert float(scale.numpy()) == 2.0**15  # Keras' initial scale: no overflow, 2000 good steps not reached

    # The scale is training state: a resumed run starts from the saved one, not from 2**15.
    scale.assign(1024.0)
    good_steps.assign(7)
    runner.save_checkpoint()
    from dsl.commands._training import build_runner
    from dsl.language.pipeline import load_resolved

    again = build_runner(load_resolved(tmp_path / "engine.yaml"), resume=True)
    again.restore()
    restored_scale, restored_good = loss_scale_variables(again.optimizer)
    assert (float(restored_scale.numpy()), int(restored_good.numpy())) == (1024.0, 7)


def test_an_overflowing_float16_step_is_skipped_and_halves_the_scale(tmp_path: Path, float32_afterwards: None) -> None:
    import numpy as np
    import tensorflow as tf

    from dsl.engine.precision import loss_scale_variables

    runner = make_runner(tmp_path, limit="max_epochs: 1\n  precision: mixed_float16", steps_per_call=1)
    scale, _ = loss_scale_variables(runner.optimizer)
    scale.assign(2.0**60)  # any gradient times this overflows float16 (max 65504)
    before = [np.array(v.numpy()) for v in runner.model.trainable_variables]
    assert runner.run() == 0
    assert runner.step == 5 and float(scale.numpy()) == 2.0 ** (60 - 5)  # halved after each step
    after = [np.array(v.numpy()) for v in runner.model.trainable_variables]
    assert all((a == b).all() for a, b in zip(before, after))  # every step was skipped, not applied
    assert all(tf.math.is_finite(v).numpy().all() for v in runner.model.trainable_variables)
