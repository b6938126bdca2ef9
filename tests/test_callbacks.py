"""The callbacks catalogue, driven by a small fake runner that walks a workflow like the real one.

The fake has the runner's hook-facing API (dsl/engine/runner.py); the tests that need
TensorFlow give it a real tiny Keras model, optimizer and CheckpointManager.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import jsonschema
import pytest
from pipeline_support import typed_pipeline

from dsl.distributed.scaling import Scaling
from dsl.distributed.sync_batch_norm import BatchNormSync
from dsl.engine.contracts import RunnerView
from dsl.engine.hooks import Callback, sort_callbacks
from dsl.language import registry
from dsl.language.context import BuildContext, Placement
from dsl.language.errors import DslError

Values = Callable[["FakeRunner"], dict[str, float]]


def make(type_: str, **params: Any) -> Callback:
    """A callback built as the engine builds it: schema-validated, defaults filled."""
    component = registry.lookup("callback", type_)
    section = {"type": type_, **params}
    jsonschema.validate(section, component.schema())
    for name, schema in component.params.items():
        section.setdefault(name, schema.get("default"))
    return component.builder(section, None)


class Weight:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


class StubModel:
    """Stands in for a Keras model where only the weight shapes are read."""

    weights: ClassVar[list[Weight]] = [Weight(3, 4), Weight(4)]
    trainable_weights: ClassVar[list[Weight]] = weights[:1]


class FakeRunner:
    """The runner's hook-facing state and methods, with a loop in `run` shaped like the real one."""

    def __init__(self, model_dir: Path, *, workflow=(("train", 1),), max_epochs: int | None = 3,
                 max_iters: int | None = None, steps_per_epoch: int = 10, steps_per_call: int = 1,
                 val_steps: int = 2, batch_size: int = 4, world_size: int = 1, model: Any = None) -> None:
        self.pipeline = typed_pipeline(runner={"workflow": [list(p) for p in workflow]})
        self.model_dir = Path(model_dir)
        self.placement = Placement(rank=0, world_size=world_size)
        self.context = BuildContext(pipeline=self.pipeline, model_dir=self.model_dir, placement=self.placement)
        self.workflow, self.max_epochs, self.max_iters = list(workflow), max_epochs, max_iters
        self.by_epoch = max_epochs is not None
        self.steps_per_epoch, self.steps_per_call, self.val_steps = steps_per_epoch, steps_per_call, val_steps
        self.batch_size, self.global_batch_size = batch_size, batch_size * world_size
        self.scaling = Scaling(world_size, batch_size * world_size, batch_size, "none", "none", 1.0)
        self.batch_norm_sync: BatchNormSync | None = None  # no backend decided: nothing to say in the header
        # What the header reads of the modeler: the base rate and the schedule (a constant here).
        self.modeler: Any = SimpleNamespace(params={"optimizer": {"learning_rate": 0.1}},
                                            learning_rate=lambda steps_per_epoch, scale=1.0: 0.1 * scale)
        self.mode, self.step, self.epoch, self.inner_step = "train", 0, 0, 0
        self.phase_steps: int | None = None
        self.outputs: dict[str, float] = {}
        self.phase_outputs: dict[str, float] = {}
        self.iter_seconds = 0.1
        self.should_stop, self.failed, self.stop_reason, self.resumed = False, False, "", False
        self.phase_recorded_before = False  # nothing resumed here (tests/test_resume_records.py resumes real runs)
        self.saves: list[int] = []
        self.metrics: list[tuple[str, dict[str, float], int]] = []
        self.model, self.optimizer, self.checkpoint, self.checkpoint_manager = model or StubModel(), None, None, None
        self._writers: dict[str, Any] = {}
        self.graph_def: Any = None
        if model is not None:
            import tensorflow as tf

            self.optimizer = tf.keras.optimizers.SGD(0.1)
            self.checkpoint = tf.train.Checkpoint(model=model, optimizer=self.optimizer)
            self.checkpoint_manager = tf.train.CheckpointManager(
                self.checkpoint, str(self.model_dir / "checkpoints"), max_to_keep=5
            )

    # ---------------------------------------------------------------- the hook-facing API
    def request_stop(self, reason: str) -> None:
        self.should_stop = True
        self.stop_reason = self.stop_reason or reason

    def fail(self, reason: str) -> None:
        self.failed = True
        self.request_stop(reason)

    def save_checkpoint(self) -> str | None:
        if self.saves and self.saves[-1] == self.step:
            return f"ckpt-{self.step}"
        self.saves.append(self.step)
        if self.checkpoint_manager is not None:
            return self.checkpoint_manager.save(checkpoint_number=self.step)
        return f"ckpt-{self.step}"

    def summary_writer(self, mode: str) -> Any:
        import tensorflow as tf

        if mode not in self._writers:
            self._writers[mode] = tf.summary.create_file_writer(str(self.model_dir / "tensorboard" / mode))
        return self._writers[mode]

    def train_graph_def(self) -> Any:
        return self.graph_def

    def log_metrics(self, mode: str, values: dict[str, float]) -> None:
        self.metrics.append((mode, dict(values), self.step))

    def print(self, message: str) -> None:
        print(message)

    def notice(self, message: str) -> None:
        print(f"dslrun: {message}", file=sys.stderr)

    # ---------------------------------------------------------------------------- the loop
    def run(self, hooks: list[Callback], train: Values, val: Values | None = None,
            seconds: Callable[[int], float] = lambda call: 0.1) -> None:
        """Walk the workflow until max_epochs / max_iters; `train`/`val` give each call's outputs."""
        self.callbacks, calls = sort_callbacks(hooks), 0
        self._call("before_run")
        while not self.should_stop and (self.epoch < self.max_epochs if self.by_epoch else self.step < self.max_iters):
            for mode, count in self.workflow:
                for _ in range(count):
                    if self.should_stop:
                        break
                    if mode == "val":
                        self._val_phase(val)
                        continue
                    self._train_phase(train, seconds, calls)
                    calls += self.phase_steps
        self._call("after_run")

    def _train_phase(self, train: Values, seconds: Callable[[int], float], calls: int) -> None:
        total = self.steps_per_epoch
        self.mode, self.inner_step, self.phase_steps = "train", 0, total
        self._call("before_train_epoch")
        losses = []
        while self.inner_step < total and not self.should_stop:
            count = min(self.steps_per_call, total - self.inner_step)
            self._call("before_train_iter")
            self.step += count
            self.inner_step += count
            if self.inner_step == total:
                self.epoch += 1  # as in the real runner: counted before after_train_iter
            self.outputs = train(self)
            losses.append(self.outputs["loss"])
            self.iter_seconds = seconds(calls + self.inner_step)
            self._call("after_train_iter")
        self.phase_outputs = {**self.outputs, "loss": sum(losses) / len(losses)}
        self._call("after_train_epoch")

    def _val_phase(self, val: Values) -> None:
        self.mode, self.inner_step, self.phase_steps = "val", 0, self.val_steps
        self._call("before_val_epoch")
        self._call("before_val_iter")
        self.outputs = val(self)
        self.inner_step = self.val_steps
        self._call("after_val_iter")
        self.phase_outputs = dict(self.outputs)
        self._call("after_val_epoch")
        self.mode = "train"

    def _call(self, point: str) -> None:
        for hook in self.callbacks:
            getattr(hook, point)(self)


def constant(**values: float) -> Values:
    return lambda runner: dict(values)


def sequence(name: str, values: list[float], **others: float) -> Values:
    """Outputs whose `name` takes the next of `values` at each call."""
    remaining = iter(values)
    return lambda runner: {name: next(remaining), **others}


TRAIN = constant(loss=1.0, accuracy=0.5, learning_rate=0.1)


# ------------------------------------------------------------------------------ catalogue
CATALOGUE = {
    "train_basic", "val_basic", "train_loss", "val_loss", "train_accuracy", "val_accuracy",
    "train_speed", "val_speed", "train_summary", "val_summary", "checkpoint", "early_stopping",
    "terminate_on_nan", "lr_logger", "csv_logger", "progress", "stop_at_time", "init_checkpoint",
}


def test_every_callback_is_registered_with_documented_params():
    components = {c.type: c for c in registry.components("callback")}
    assert set(components) >= CATALOGUE
    for type_ in CATALOGUE:
        component = components[type_]
        jsonschema.Draft202012Validator.check_schema(component.schema())
        assert "priority" in component.params, type_
        for name, schema in component.params.items():
            assert schema.get("description"), (type_, name)
            assert name in component.required or "default" in schema, (type_, name)


def test_callback_modules_do_not_import_tensorflow():
    code = (
        "import importlib, pkgutil, sys, dsl.callbacks as p\n"
        "for m in pkgutil.iter_modules(p.__path__):\n"
        "    if not m.name.startswith('_'): importlib.import_module('dsl.callbacks.' + m.name)\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("type_", "params"),
    [
        ("stop_at_time", {}),
        ("stop_at_time", {"seconds": -5}),
        ("early_stopping", {"monitor": "accuracy"}),
        ("checkpoint", {"save_best": {"monitor": "val/accuracy", "mode": "up"}}),
        ("train_loss", {"every_n_iters": 0}),
        ("init_checkpoint", {}),
    ],
)
def test_schema_rejects_bad_params(type_, params):
    with pytest.raises(jsonschema.ValidationError):
        make(type_, **params)


def test_cadence_fires_when_several_steps_per_call_cross_a_multiple():
    from dsl.callbacks._common import Cadence

    cadence = Cadence(5)
    fired = [step for step in range(3, 31, 3) if cadence.advance(step)]
    assert fired == [6, 12, 15, 21, 27, 30]
    assert cadence.delta == 3


# ------------------------------------------------------------------------ printing hooks
def test_train_loss_prints_window_mean_every_n_iters_and_epoch_mean(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=6)
    losses = sequence("loss", [6.0, 5.0, 4.0, 3.0, 2.0, 1.0], accuracy=0.5)
    runner.run([make("train_loss", every_n_iters=4)], losses)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "train epoch 1/1 iter 4/6 (step 4): loss 4.5000",  # mean of 6, 5, 4, 3
        "train epoch 1/1 (step 6): loss 3.5000",
    ]


def test_train_loss_leaves_the_epoch_value_to_a_progress_bar(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=6)
    runner.pipeline = typed_pipeline(callbacks=[{"type": "train_loss"}, {"type": "progress"}])
    runner.run([make("train_loss", every_n_iters=4), make("progress")],
               sequence("loss", [6.0, 5.0, 4.0, 3.0, 2.0, 1.0], accuracy=0.5))
    captured = capsys.readouterr()
    # The bar's last line says the epoch's loss; train_loss keeps only its windowed means.
    assert captured.out.splitlines() == ["train epoch 1/1 iter 4/6 (step 4): loss 4.5000"]
    assert captured.err.splitlines()[-1].startswith("train epoch 1 [========================] 6/6")


def test_on_several_ranks_the_values_within_a_phase_say_they_are_rank_zeros(tmp_path, capsys):
    # Within a phase the chief prints its own batches' loss; the phase's value is every rank's. A
    # 2-rank trial saw two losses for step 25 and could not tell why.
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=6, world_size=2)
    runner.pipeline = typed_pipeline(callbacks=[{"type": "train_loss"}, {"type": "progress"}])
    hook = make("progress", refresh_seconds=0)
    runner.run([make("train_loss", every_n_iters=4), hook], sequence("loss", [6.0, 5.0, 4.0, 3.0, 2.0, 1.0], accuracy=0.5))
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["train epoch 1/1 iter 4/6 (step 4): loss 4.5000 (rank 0)"]
    bar = captured.err.splitlines()
    assert bar[0].endswith("loss 6.0000  accuracy 0.5000 (rank 0)"), bar
    assert "rank" not in bar[-1] and bar[-1].startswith("train epoch 1 [========================] 6/6"), bar


def test_train_accuracy_prints_running_value_and_val_printers_only_after_val(tmp_path, capsys):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=2, steps_per_epoch=4)
    hooks = [make("train_accuracy", every_n_iters=2), make("val_loss"), make("val_accuracy")]
    runner.run(hooks, sequence("accuracy", [0.1 * i for i in range(1, 9)], loss=1.0),
               constant(loss=0.75, accuracy=0.625))
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "train epoch 1/2 iter 2/4 (step 2): accuracy 0.2000",
        "train epoch 1/2 iter 4/4 (step 4): accuracy 0.4000",
        "train epoch 1/2 (step 4): accuracy 0.4000",
        "val epoch 1/2 (step 4): loss 0.7500",
        "val epoch 1/2 (step 4): accuracy 0.6250",
    ]
    assert len(lines) == 10


def test_iter_based_positions_and_missing_output_error(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=None, max_iters=4, steps_per_epoch=4)
    runner.run([make("train_loss", every_n_iters=2)], TRAIN)
    assert capsys.readouterr().out.splitlines()[0] == "train iter 2/4: loss 1.0000"
    runner = FakeRunner(tmp_path, max_epochs=1)
    with pytest.raises(DslError, match=r"train_accuracy needs the train output 'accuracy'.*train/loss"):
        runner.run([make("train_accuracy")], constant(loss=1.0))


def test_speed_leaves_warmup_out_and_reports_global_images_per_second(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=6, steps_per_call=2, batch_size=8, world_size=2)
    # The first call (tracing) takes 10 s; the others 0.5 s for 2 steps of 16 images.
    runner.run([make("train_speed", every_n_iters=4)], TRAIN, seconds=lambda call: 10.0 if call == 2 else 0.5)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "train epoch 1/1 iter 4/6 (step 4): 64.0 images/s, 250.0 ms/step",
        "train epoch 1/1 (step 6): 64.0 images/s, 250.0 ms/step (phase average)",
    ]


def test_val_speed_and_val_basic(tmp_path, capsys):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=3, steps_per_epoch=2)
    accuracies = sequence("accuracy", [0.5, 0.7, 0.6], loss=0.25)
    basic = make("val_basic")
    runner.run([make("val_speed", warmup_iters=0), basic], TRAIN, accuracies)
    lines = capsys.readouterr().out.splitlines()
    assert "val epoch 1/3 (step 2): 80.0 images/s, 50.0 ms/step (phase average)" in lines
    assert "val epoch 3/3 (step 6): loss 0.2500, accuracy 0.6000 (best accuracy 0.7000 at step 4)" in lines
    # Trial B16: without save_best the best line was read as a model to ask for (`--checkpoint best`).
    assert lines[-1] == ("best val accuracy 0.7000 at step 4 (not kept: add save_best to the checkpoint callback "
                         "to keep the best model for --checkpoint best)")
    (Path(runner.model_dir) / "best").mkdir()
    (Path(runner.model_dir) / "best" / "best.json").write_text(json.dumps({"monitor": "val/accuracy", "step": 4}))
    basic.after_run(runner)
    assert capsys.readouterr().out.splitlines()[-1] == f"best val accuracy 0.7000 at step 4 (kept in {tmp_path / 'best'})"


def test_val_basic_says_when_the_score_was_still_rising_at_the_end(tmp_path, capsys):
    """Trial A11: a detector ended at mAP 0.28 after 12 epochs (0.71 after 30) with no word that it
    was still learning. Three val scores in a row each above the one before: said, with the length
    key; a score that fell back once, or a run that stopped early, says nothing."""
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=4, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("map", [0.1, 0.21, 0.25, 0.28], loss=0.5))
    assert capsys.readouterr().err.splitlines() == [
        "dslrun: val/map rose 0.2100 -> 0.2500 -> 0.2800 over the last 3 val phases: the run likely ended before its "
        "best; raise runner.max_epochs (4) and run it again, and it continues from its last checkpoint"]
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=4, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("accuracy", [0.5, 0.8, 0.7, 0.75], loss=0.25))
    assert "rose" not in capsys.readouterr().err  # its best was 3 phases before the end
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=5, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("accuracy", [0.55, 0.59, 0.6, 0.595, 0.605], loss=0.25))
    assert "rose" not in capsys.readouterr().err  # wavering near a ceiling of its own: 1 % over 4 phases
    # Trial A14: a new best at epoch 7 of 8, then a dip: the strict rise fails, the run is still learning.
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=6, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("map", [0.03, 0.05, 0.09, 0.11, 0.135, 0.132], loss=0.5))
    assert capsys.readouterr().err.splitlines() == [
        "dslrun: val/map rose 0.0900 -> 0.1100 -> 0.1350 -> 0.1320 over the last 4 val phases (its best, 0.1350, in "
        "the last two): the run likely ended before its best; raise runner.max_epochs (6) and run it again, and it "
        "continues from its last checkpoint"]
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=3, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("accuracy", [0.202, 0.832, 0.972], loss=0.25))  # make demo's
    assert "rose" not in capsys.readouterr().err  # levelling off: the last gain is under half the one before
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=4, steps_per_epoch=2)
    runner.run([make("val_basic")], TRAIN, sequence("map", [0.05, 0.0876, 0.1071, 0.1118], loss=0.5))  # trial A13's
    assert "val/map rose 0.0876 -> 0.1071 -> 0.1118" in capsys.readouterr().err  # slowing, but far below 0.9
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=4, steps_per_epoch=2)
    runner.stop_reason = "early_stopping: val/loss did not improve"
    runner.run([make("val_basic")], TRAIN, sequence("accuracy", [0.5, 0.6, 0.7, 0.8], loss=0.25))
    assert "rose" not in capsys.readouterr().err


def test_progress_throttles_plain_lines_when_stderr_is_not_a_tty(tmp_path, capsys):
    clock = iter(range(100))
    hook = make("progress", refresh_seconds=3)
    hook.clock = lambda: float(next(clock))
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=8)
    runner.run([hook], TRAIN)
    lines = capsys.readouterr().err.splitlines()
    # Drawn at the first step, then at most every 3 clock ticks, then once at the end of the phase.
    assert [line.split()[4] for line in lines] == ["1/8", "4/8", "7/8", "8/8"]
    assert lines[0].startswith("train epoch 1 [") and "ETA ?" in lines[0] and "loss 1.0000" in lines[0]
    # The rate comes from the steps after the first call (which traced the graph): 1 s a step, 4 to go.
    assert "ETA 0:00:04" in lines[1]
    assert "\r" not in "".join(lines)


def test_progress_redraws_one_line_on_a_terminal(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    clock = iter(range(100))
    hook = make("progress")  # every 1 s on a terminal
    hook.clock = lambda: float(next(clock))
    FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=3).run([hook], TRAIN)
    text = terminal.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("\n")
    assert text.split("\r")[-1].startswith("train epoch 1 [========================] 3/3 0:00:03")


def test_train_basic_header_and_final_checkpoint(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=3, world_size=2)
    runner.run([make("train_basic")], TRAIN)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"pipeline tiny: 16 parameters (12 trainable), 3 steps/epoch, global batch 8 = 2 x 4, "
        f"learning rate 0.1 (x1, batch_scaling none), max_epochs 2, model_dir {tmp_path}"
    )
    assert runner.saves == [6]
    assert lines[-1] == "finished at step 6 (epoch 2); checkpoint ckpt-6"
    # A schedule's drops are on the first line (trial B16 could not see an inherited one there).
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=3, world_size=2)
    runner.modeler.params["lr_schedule"] = {"type": "piecewise", "boundaries": [1], "values": [1.0, 0.1]}
    runner.run([make("train_basic")], TRAIN)
    assert "learning rate 0.1 (x1, batch_scaling none), schedule piecewise (x1, x0.1 from epoch 1), max_epochs 2" \
        in capsys.readouterr().out.splitlines()[0]


# -------------------------------------------------------------------- stopping and failing
def test_early_stopping_stops_after_patience_with_reason(tmp_path):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=20, steps_per_epoch=2)
    val_losses = sequence("loss", [1.0, 0.8, 0.85, 0.79, 0.9, 0.95], accuracy=0.5)
    runner.run([make("early_stopping", patience=3, min_delta=0.02)], TRAIN, val_losses)
    # 0.79 is better than 0.8 by less than min_delta: phases 3, 4, 5 do not improve.
    assert runner.should_stop and runner.epoch == 5
    assert runner.stop_reason == (
        "early stopping: val/loss did not improve (min, min_delta 0.02) for 3 val phases; best 0.8000 at step 4"
    )


def test_early_stopping_auto_mode_maximises_accuracy_and_honours_baseline(tmp_path):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=10, steps_per_epoch=1)
    hook = make("early_stopping", monitor="val/accuracy", patience=2)
    runner.run([hook], TRAIN, sequence("accuracy", [0.1, 0.2, 0.3, 0.4, 0.3, 0.35, 0.5], loss=1.0))
    assert hook.monitor.mode == "max" and runner.epoch == 6 and "best 0.4000 at step 4" in runner.stop_reason

    runner = FakeRunner(tmp_path, workflow=(("train", 1),), max_epochs=10, steps_per_epoch=1)
    runner.run([make("early_stopping", monitor="train/loss", patience=2, baseline=0.5)], TRAIN)
    assert runner.epoch == 2 and "never beat the baseline 0.5000" in runner.stop_reason


def test_early_stopping_unknown_monitor_lists_available_outputs(tmp_path):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=2)
    with pytest.raises(DslError, match=r"val/acc.*available: val/accuracy, val/loss"):
        runner.run([make("early_stopping", monitor="val/acc")], TRAIN, constant(loss=1.0, accuracy=0.5))
    runner = FakeRunner(tmp_path, workflow=(("train", 1),), max_epochs=2)
    with pytest.raises(DslError, match=r"runner.workflow .* has no val phase"):
        runner.run([make("early_stopping")], TRAIN)


def saved_states(runner: FakeRunner, hooks: list[Callback]) -> dict[str, dict[str, Any]]:
    """What the runner writes beside a checkpoint for each hook (before_save_checkpoint)."""
    states: dict[str, dict[str, Any]] = {}
    for hook in hooks:
        hook.before_save_checkpoint(runner, states.setdefault(hook.name, {}))
    return states


def test_early_stopping_and_val_basic_state_survives_a_resume(tmp_path, capsys):
    first = [make("early_stopping", patience=3), make("val_basic")]
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=2, steps_per_epoch=2)
    runner.run(first, TRAIN, sequence("loss", [1.0, 0.5], accuracy=0.9))
    states = json.loads(json.dumps(saved_states(runner, first)))  # as the state file stores them
    capsys.readouterr()

    # Resumed at epoch 2 (step 4): the patience and the best carry on.
    second = [make("early_stopping", patience=3), make("val_basic")]
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=9, steps_per_epoch=2)
    runner.step, runner.epoch, runner.resumed = 4, 2, True
    for hook in second:
        hook.after_load_checkpoint(runner, states[hook.name])
    runner.run(second, TRAIN, sequence("loss", [0.6, 0.7, 0.8, 0.9], accuracy=0.7))
    assert runner.epoch == 5 and "best 0.5000 at step 4" in runner.stop_reason
    assert capsys.readouterr().out.splitlines()[-1].startswith("best val accuracy 0.9000 at step 2 (not kept")


def test_early_stopping_whose_patience_was_spent_stops_when_loaded(tmp_path):
    hook = make("early_stopping", patience=2)
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)))
    state = {"monitor": "val/loss", "mode": "min", "best": 0.5, "best_step": 4, "wait": 2}
    hook.after_load_checkpoint(runner, state)
    assert runner.should_stop and "best 0.5000 at step 4; raise early_stopping.patience" in runner.stop_reason
    # State of another monitor is not this callback's: it starts afresh.
    other = make("early_stopping", monitor="val/accuracy", patience=2)
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)))
    other.after_load_checkpoint(runner, state)
    assert not runner.should_stop and (other.wait, other.best) == (0, None)


def test_terminate_on_nan_fails_before_checkpoints_are_written(tmp_path):
    losses = sequence("loss", [1.0, 0.5, math.nan, 0.4], accuracy=0.5)
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=4)
    # Listed last, terminate_on_nan still runs first (priority HIGHEST).
    hooks = [make("checkpoint", every_n_iters=1), make("train_basic"), make("terminate_on_nan")]
    runner.run(hooks, losses)
    assert runner.failed and runner.stop_reason.startswith("loss is nan at step 3")
    assert runner.saves == [1, 2]

    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=4)
    runner.run([make("terminate_on_nan")], sequence("loss", [1.0, 1e30, 0.0, 2.0]))
    assert not runner.failed and not runner.should_stop
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=4)
    runner.run([make("terminate_on_nan")], sequence("loss", [1.0, math.inf, 0.0, 2.0]))
    assert runner.failed and "loss is inf at step 2" in runner.stop_reason


def test_stop_at_time_saves_then_stops_when_the_budget_is_spent(tmp_path):
    now = [100.0]
    assert make("stop_at_time", minutes=1.5, seconds=10).budget == 100
    hook = make("stop_at_time", minutes=1)
    hook.clock = lambda: now[0]

    def train(runner: FakeRunner) -> dict[str, float]:
        now[0] += 25.0  # each step takes 25 s
        return {"loss": 1.0}

    runner = FakeRunner(tmp_path, max_epochs=5, steps_per_epoch=4)
    runner.run([hook], train)
    assert runner.step == 3 and runner.saves == [3]
    assert runner.stop_reason == "stop_at_time: 75 s elapsed, budget 60 s; checkpoint ckpt-3"


# --------------------------------------------------------------------------- checkpoints
def test_checkpoint_cadence_by_iters_and_by_epochs(tmp_path):
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=6, steps_per_call=4)
    runner.run([make("checkpoint", every_n_iters=5, save_last=False)], TRAIN)
    assert runner.saves == [6, 10]  # calls end at steps 4, 6 | 10, 12: 5 is crossed at 6, 10 at 10

    runner = FakeRunner(tmp_path, max_epochs=5, steps_per_epoch=2)
    runner.run([make("checkpoint", every_n_epochs=2), make("train_basic")], TRAIN)
    assert runner.saves == [4, 8, 10]  # epochs 2 and 4, then the last state once


@pytest.fixture(scope="module")
def tf():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow


def tiny_model(tf: Any, num_classes: int = 3, seed: int = 0) -> Any:
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((4, 4, 1))
    x = tf.keras.layers.Conv2D(2, 3, name="conv")(inputs)
    x = tf.keras.layers.BatchNormalization(name="norm")(x)
    x = tf.keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = tf.keras.layers.Dense(num_classes, name="classifier")(x)
    model = tf.keras.Model(inputs, outputs)
    for weight in model.weights:  # every weight differs between seeds (biases start at zero)
        weight.assign(tf.random.uniform(weight.shape, 0.5, 1.5))
    return model


def test_checkpoint_keeps_the_best_model_apart_and_resumes_its_record(tf, tmp_path, capsys):
    model = tiny_model(tf)
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=3, steps_per_epoch=2, model=model)
    kernels = []

    def train(runner: FakeRunner) -> dict[str, float]:
        model.get_layer("classifier").kernel.assign_add(tf.ones_like(model.get_layer("classifier").kernel))
        return {"loss": 1.0, "accuracy": 0.5}

    def val(runner: FakeRunner) -> dict[str, float]:
        kernels.append(model.get_layer("classifier").kernel.numpy().copy())
        return {"loss": 1.0, "accuracy": [0.4, 0.6, 0.5][len(kernels) - 1]}

    runner.run([make("checkpoint", save_best={"monitor": "val/accuracy"})], train, val)
    record = json.loads((tmp_path / "best" / "best.json").read_text())
    assert record == {"monitor": "val/accuracy", "mode": "max", "value": 0.6, "step": 4, "epoch": 2,
                      "checkpoint": "ckpt-4"}
    assert runner.saves == [2, 4, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "checkpoints"]  # no temp dirs left
    restored = tiny_model(tf, seed=1)
    tf.train.Checkpoint(model=restored).read(tf.train.latest_checkpoint(str(tmp_path / "best"))).expect_partial()
    assert (restored.get_layer("classifier").kernel.numpy() == kernels[1]).all()
    assert "new best val/accuracy 0.6000 at step 4" in capsys.readouterr().out

    # A resumed run keeps the earlier best unless it beats it; a fresh run starts its own.
    # The best comes from the checkpoint's state, else (older checkpoints) from best.json.
    for resumed, state, best in [(True, None, 0.6), (True, {"monitor": "val/accuracy", "mode": "max", "best": 0.5},
                                                         0.55), (False, None, 0.55)]:
        runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=1, steps_per_epoch=2, model=model)
        runner.resumed = resumed
        hook = make("checkpoint", save_best={"monitor": "val/accuracy"})
        if state is not None:
            hook.after_load_checkpoint(runner, state)
        runner.run([hook], TRAIN, constant(loss=1.0, accuracy=0.55))
        assert json.loads((tmp_path / "best" / "best.json").read_text())["value"] == best
        assert saved_states(runner, [hook])["checkpoint"] == {"monitor": "val/accuracy", "mode": "max", "best": best}


def test_csv_logger_appends_across_runs_with_one_header(tmp_path):
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=2, steps_per_epoch=2)
    runner.run([make("csv_logger")], constant(loss=1.0, accuracy=0.5), constant(loss=0.5, accuracy=0.75))
    # A resumed run whose phases bring a new output: the header widens, earlier rows stay.
    runner = FakeRunner(tmp_path, workflow=(("train", 1),), max_epochs=1, steps_per_epoch=2)
    runner.step = runner.epoch = 4
    runner.max_epochs = 5
    runner.run([make("csv_logger")], constant(loss=0.25, accuracy=0.9, top_5_accuracy=1.0))
    text = (tmp_path / "history.csv").read_text()
    assert text.count("mode,") == 1
    rows = list(csv.DictReader(text.splitlines()))
    assert list(rows[0]) == ["mode", "epoch", "step", "accuracy", "loss", "top_5_accuracy"]
    assert [(r["mode"], r["epoch"], r["step"]) for r in rows] == [
        ("train", "1", "2"), ("val", "1", "2"), ("train", "2", "4"), ("val", "2", "4"), ("train", "5", "6")
    ]
    assert rows[1]["accuracy"] == "0.75" and rows[1]["top_5_accuracy"] == "" and rows[4]["top_5_accuracy"] == "1.0"


# ----------------------------------------------------------------------------- TensorBoard
def events(tf: Any, directory: Path) -> list[Any]:
    return [e for f in sorted(glob.glob(str(directory / "events.*"))) for e in tf.compat.v1.train.summary_iterator(f)]


def scalars(tf: Any, directory: Path) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for event in events(tf, directory):
        for value in event.summary.value:
            found.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return found


def test_lr_logger_records_the_rate_in_metrics_and_tensorboard(tf, tmp_path):
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=6)
    runner.run([make("lr_logger", every_n_iters=3)], lambda r: {"loss": 1.0, "learning_rate": 0.1 / r.step})
    assert runner.metrics == [("train", {"learning_rate": 0.1 / 3}, 3), ("train", {"learning_rate": 0.1 / 6}, 6)]
    runner.summary_writer("train").flush()
    logged = scalars(tf, tmp_path / "tensorboard" / "train")["train/learning_rate"]
    assert [step for step, _ in logged] == [3, 6] and logged[1][1] == pytest.approx(0.1 / 6)


def test_train_and_val_summary_write_scalars_and_the_graph(tf, tmp_path):
    model = tiny_model(tf)
    runner = FakeRunner(tmp_path, workflow=(("train", 1), ("val", 1)), max_epochs=2, steps_per_epoch=4, model=model)
    step = tf.function(lambda images: model(images, training=False))
    runner.graph_def = step.get_concrete_function(tf.TensorSpec([None, 4, 4, 1])).graph.as_graph_def()
    hooks = [make("train_summary", every_n_iters=2), make("val_summary")]
    runner.run(hooks, TRAIN, constant(loss=0.5, accuracy=0.75))
    train = scalars(tf, tmp_path / "tensorboard" / "train")
    assert set(train) == {"train/loss", "train/accuracy", "train/learning_rate",
                          "epoch/loss", "epoch/accuracy", "epoch/learning_rate"}
    assert [s for s, _ in train["train/loss"]] == [2, 4, 6, 8] and [s for s, _ in train["epoch/loss"]] == [4, 8]
    assert scalars(tf, tmp_path / "tensorboard" / "val")["epoch/accuracy"] == [(4, 0.75), (8, 0.75)]
    graphs = [e.graph_def for e in events(tf, tmp_path / "tensorboard" / "train") if e.graph_def]
    assert len(graphs) == 1
    graph = tf.compat.v1.GraphDef.FromString(graphs[0])
    assert any("classifier" in node.name for node in graph.node) or graph.library.function


# ----------------------------------------------------------------------- init_checkpoint
def dslrun_checkpoint(tf: Any, directory: Path, model: Any) -> str:
    """A checkpoint laid out as the runner writes it: model, optimizer and step side by side."""
    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=tf.Variable(7, dtype=tf.int64))
    return tf.train.CheckpointManager(checkpoint, str(directory / "checkpoints"), max_to_keep=1).save(7)


def loaded(target: Any, source: Any) -> dict[str, bool]:
    return {v.name: v.shape == w.shape and bool((v.numpy() == w.numpy()).all())
            for v, w in zip(target.weights, source.weights)}


def test_init_checkpoint_loads_a_dslrun_run_directory(tf, tmp_path, capsys):
    source = tiny_model(tf, seed=1)
    dslrun_checkpoint(tf, tmp_path / "pretrained", source)
    target = tiny_model(tf, seed=2)
    runner = FakeRunner(tmp_path / "run", max_epochs=1, model=target)
    make("init_checkpoint", path=str(tmp_path / "pretrained")).before_run(runner)
    assert all(loaded(target, source).values())
    assert "init_checkpoint: restored 8 variables by name from " in capsys.readouterr().out


def test_init_checkpoint_loads_the_best_model_of_a_run(tf, tmp_path):
    """best/ holds the model alone (no optimizer, no step): its directory and its prefix both load."""
    from dsl.engine.best import write_best

    source = tiny_model(tf, seed=1)
    record = {"monitor": "val/accuracy", "mode": "max", "value": 0.9, "step": 7, "epoch": 1}
    write_best(tmp_path / "pretrained", source, record)
    for path in ("pretrained/best", "pretrained/best/ckpt-7"):
        target = tiny_model(tf, seed=2)
        make("init_checkpoint", path=str(tmp_path / path)).before_run(FakeRunner(tmp_path / "run", model=target))
        assert all(loaded(target, source).values())


def test_init_checkpoint_resets_the_head_when_the_classes_change_and_freezes_by_group(tf, tmp_path, capsys):
    source = tiny_model(tf, num_classes=5, seed=1)
    prefix = dslrun_checkpoint(tf, tmp_path / "pretrained", source)
    target = tiny_model(tf, num_classes=3, seed=2)
    fresh = target.get_layer("classifier").kernel.numpy().copy()
    runner = FakeRunner(tmp_path / "run", max_epochs=1, model=target)

    with pytest.raises(DslError, match=r"classifier/kernel is \(2, 5\) in the file, \(2, 3\) in the model.*skip"):
        make("init_checkpoint", path=prefix, reset_head=False).before_run(runner)
    assert (target.get_layer("conv").kernel.numpy() != source.get_layer("conv").kernel.numpy()).any()

    make("init_checkpoint", path=prefix, trainable=["head"]).before_run(runner)
    same = loaded(target, source)
    assert not same["classifier/kernel:0"] and (target.get_layer("classifier").kernel.numpy() == fresh).all()
    assert all(v for name, v in same.items() if not name.startswith("classifier"))
    assert [v.name for v in target.trainable_weights] == ["classifier/kernel:0", "classifier/bias:0"]
    assert not target.get_layer("conv").trainable and not target.get_layer("norm").trainable
    out = capsys.readouterr().out
    assert "restored 6 variables by name" in out
    assert "head reset (classifier is (2, 3) in the model, (2, 5) in the file: another number of classes)" in out
    assert "froze 2 layers; 2 variables stay trainable" in out


def test_init_checkpoint_skips_by_pattern_and_backbone_group(tf, tmp_path, capsys):
    source = tiny_model(tf, seed=1)
    prefix = dslrun_checkpoint(tf, tmp_path / "pretrained", source)
    target = tiny_model(tf, seed=2)
    make("init_checkpoint", path=prefix, skip=["backbone"]).before_run(FakeRunner(tmp_path / "run", model=target))
    same = loaded(target, source)
    assert [name for name, v in same.items() if v] == ["classifier/kernel:0", "classifier/bias:0"]
    assert "skipped 6 by init_checkpoint.skip: conv/kernel, conv/bias, norm/gamma" in capsys.readouterr().out


def test_init_checkpoint_refuses_what_would_silently_train_the_wrong_thing(tf, tmp_path):
    source = tiny_model(tf, seed=1)
    prefix = dslrun_checkpoint(tf, tmp_path / "pretrained", source)
    target = tiny_model(tf, seed=2)
    runner = FakeRunner(tmp_path / "run", model=target)
    with pytest.raises(DslError, match=r"skip: \['\^logit/'\] match no variable of the model nor of the file.*"
                                       r"the model's variables: conv/kernel.*the file's: conv/kernel"):
        make("init_checkpoint", path=prefix, skip=["^logit/"]).before_run(runner)
    with pytest.raises(DslError, match=r"trainable without a fresh head: the head \(classifier/bias, "
                                       r"classifier/kernel\) has the file's values.*reset_head: false"):
        make("init_checkpoint", path=prefix, trainable=["head"]).before_run(runner)
    assert not any(loaded(target, source).values())
    make("init_checkpoint", path=prefix, trainable=["head"], reset_head=False).before_run(runner)
    assert all(loaded(target, source).values())


def test_a_checkpoint_that_would_restore_nothing_is_an_error_even_with_allow_missing(tf, tmp_path):
    """Trial B11: an MLP's checkpoint for a ResNet shared only the head's name; with allow_missing
    (which the error had suggested) the run restored 0 variables and trained on a random backbone."""
    tf.keras.utils.set_random_seed(3)
    inputs = tf.keras.Input((4, 4, 1))
    hidden = tf.keras.layers.Dense(5, name="hidden")(tf.keras.layers.Flatten(name="flatten")(inputs))
    mlp = tf.keras.Model(inputs, tf.keras.layers.Dense(3, name="classifier")(hidden))
    prefix = dslrun_checkpoint(tf, tmp_path / "mlp", mlp)
    target = tiny_model(tf, seed=2)  # conv, norm, classifier: the head is 2 x 3 here, 5 x 3 there
    runner = FakeRunner(tmp_path / "run", model=target)
    before = [w.numpy().copy() for w in target.weights]
    for accepting in ({}, {"allow_missing": True, "allow_unexpected": True}):
        with pytest.raises(DslError, match=r"would restore nothing: none of the model's 6 variables to restore is in it "
                                           r"\(only classifier/kernel, classifier/bias, which are reset or skipped, share "
                                           r"a name\), so it was saved from another network"):
            make("init_checkpoint", path=prefix, **accepting).before_run(runner)
    assert all((w.numpy() == b).all() for w, b in zip(target.weights, before))


def test_init_checkpoint_of_another_network_is_an_error_naming_both_sides(tf, tmp_path, capsys):
    """Shapes that fit are not enough: names decide, and what is missing or unexpected is said."""
    tf.keras.utils.set_random_seed(3)
    inputs = tf.keras.Input((4, 4, 1))
    x = tf.keras.layers.Conv2D(2, 3, name="stem")(inputs)
    x = tf.keras.layers.BatchNormalization(name="norm")(x)
    x = tf.keras.layers.GlobalAveragePooling2D(name="pool")(x)
    other = tf.keras.Model(inputs, tf.keras.layers.Dense(3, name="classifier")(x))
    prefix = dslrun_checkpoint(tf, tmp_path / "other", other)
    target = tiny_model(tf, seed=2)
    runner = FakeRunner(tmp_path / "run", model=target)
    with pytest.raises(DslError, match=r"2 variables of the model are not in .*: conv/kernel, conv/bias; "
                                       r"the model's variables: conv/kernel.*the file's: stem/kernel.*allow_missing"):
        make("init_checkpoint", path=prefix).before_run(runner)
    with pytest.raises(DslError, match=r"2 variables of .* are not in the model: stem/kernel, stem/bias.*"
                                       r"allow_unexpected"):
        make("init_checkpoint", path=prefix, allow_missing=True).before_run(runner)
    make("init_checkpoint", path=prefix, allow_missing=True, allow_unexpected=True).before_run(runner)
    assert loaded(target, other)["norm/gamma:0"] and not loaded(target, other)["conv/kernel:0"]
    assert "2 variables of the model are not in" in capsys.readouterr().err  # the accepted, said as a warning
    # Skipping the file's own extra variables by name is accepting them too.
    make("init_checkpoint", path=prefix, skip=["^stem/", "^conv/"]).before_run(runner)


def test_init_checkpoint_on_a_resumed_run_only_freezes(tf, tmp_path):
    source = tiny_model(tf, seed=1)
    prefix = dslrun_checkpoint(tf, tmp_path / "pretrained", source)
    target = tiny_model(tf, seed=2)
    runner = FakeRunner(tmp_path / "run", max_epochs=1, model=target)
    runner.resumed = True
    make("init_checkpoint", path=prefix, trainable=["^conv/"]).before_run(runner)
    assert not any(loaded(target, source).values())
    assert [v.name for v in target.trainable_weights] == ["conv/kernel:0", "conv/bias:0"]


@pytest.mark.parametrize("filename", ["weights.h5", "model.weights.h5"])
def test_init_checkpoint_reads_keras_weights_files(tf, tmp_path, filename):
    source = tiny_model(tf, seed=1)
    source.save_weights(str(tmp_path / filename))
    target = tiny_model(tf, seed=2)
    runner = FakeRunner(tmp_path / "run", max_epochs=1, model=target)
    make("init_checkpoint", path=str(tmp_path / filename), skip=["classifier/bias"], reset_head=False).before_run(runner)
    same = loaded(target, source)
    assert same.pop("classifier/bias:0") is False and all(same.values())


def test_init_checkpoint_errors_name_the_yaml_key(tf, tmp_path):
    runner = FakeRunner(tmp_path / "run", max_epochs=1, model=tiny_model(tf))
    with pytest.raises(DslError, match=r"init_checkpoint.path: '.*nowhere' does not exist"):
        make("init_checkpoint", path=str(tmp_path / "nowhere")).before_run(runner)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DslError, match=r"init_checkpoint.path: the directory .* holds no checkpoint"):
        make("init_checkpoint", path=str(tmp_path / "empty")).before_run(runner)
    with pytest.raises(DslError, match=r"init_checkpoint.skip\[0\] '\(' is not a valid regular expression"):
        make("init_checkpoint", path="x", skip=["("])
    with pytest.raises(DslError, match=r"init_checkpoint.trainable: \['nothing'\] matches no variable"):
        runner.resumed = True
        make("init_checkpoint", path=str(tmp_path / "nowhere"), trainable=["nothing"]).before_run(runner)


def test_restore_diagnostics_locate_what_the_run_would_refuse(tf, tmp_path):
    """What `validate --build` gets: the file matched by name with the built model, located."""
    from dsl.callbacks._init_checkpoint_check import restore_diagnostics
    from dsl.language.pipeline import check_pipeline_with_sources

    prefix = dslrun_checkpoint(tf, tmp_path / "pretrained", tiny_model(tf, seed=1))
    text = ("version: 1\ninputter: {type: synthetic, image_shape: [4, 4, 1]}\nnetwork: {type: mlp}\n"
            "modeler: {type: image_classification}\ncallbacks:\n"
            f"  - {{type: init_checkpoint, path: {prefix}, skip: ['^logit/']}}\n"
            f"  - {{type: train_basic}}\nrunner: {{max_epochs: 1}}\n")
    (tmp_path / "p.yaml").write_text(text)
    resolved, diagnostics, sources = check_pipeline_with_sources(str(tmp_path / "p.yaml"), ())
    assert resolved is not None and sources is not None and not diagnostics
    found = restore_diagnostics(resolved, sources, tiny_model(tf, seed=2))
    assert [(d.line, d.path) for d in found] == [(6, "callbacks[0].skip")]  # at the pattern, not the path
    assert "init_checkpoint.skip: ['^logit/'] match no variable" in found[0].message
    resolved["callbacks"][0]["skip"] = []
    assert restore_diagnostics(resolved, sources, tiny_model(tf, seed=2)) == []


def test_backbone_lr_multiplier_scales_the_backbone_step_alone(tf, tmp_path):
    """With plain SGD the backbone moves by multiplier x what it moves without one; the head as before."""
    from dsl.engine.gradient_scale import set_multipliers
    from dsl.engine.steps import make_step

    class Loss:
        def loss(self, labels, logits, model):
            return {"loss": tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, True))}

    images, labels = tf.random.uniform((4, 4, 4, 1), seed=1), tf.constant([0, 1, 2, 0])
    moved = []
    for multiplier in (1.0, 0.1):
        model = tiny_model(tf, seed=1)
        before = [v.numpy().copy() for v in model.trainable_variables]
        set_multipliers(model, {"conv/kernel": multiplier})
        step = make_step(model, Loss(), tf.keras.optimizers.SGD(0.5), {"loss": tf.keras.metrics.Mean()})
        step(images, labels)
        moved.append({v.name: v.numpy() - b for v, b in zip(model.trainable_variables, before)})
    assert moved[1]["conv/kernel:0"] == pytest.approx(0.1 * moved[0]["conv/kernel:0"], rel=1e-4, abs=1e-7)
    assert moved[1]["classifier/kernel:0"] == pytest.approx(moved[0]["classifier/kernel:0"], rel=1e-5)


def test_backbone_lr_multiplier_is_said_at_the_start(tf, tmp_path, capsys):
    """Trial B14 could not tell from the log whether backbone_lr_multiplier took effect (every other
    init_checkpoint setting has its line); with `trainable`, the unfreezing line says it instead."""
    runner = FakeRunner(tmp_path / "run", model=tiny_model(tf))
    runner.resumed = True  # nothing to load: the multiplier still applies to the run
    make("init_checkpoint", path="x", backbone_lr_multiplier=0.1).before_run(runner)
    out = capsys.readouterr().out
    assert "init_checkpoint: 4 backbone variables train at 0.1 x the learning rate (backbone_lr_multiplier), " \
           "the head at 1 x" in out, out


def test_init_checkpoint_resumed_in_the_second_phase_freezes_nothing(tf, tmp_path):
    runner = FakeRunner(tmp_path / "run", model=tiny_model(tf))
    runner.resumed, runner.epoch = True, 3
    make("init_checkpoint", path="x", trainable=["head"], unfreeze_after_epochs=2).before_run(runner)
    assert len(runner.model.trainable_weights) == 6


def _fake_runner_honours_the_contract(runner: FakeRunner) -> RunnerView:
    """Never called: `make lint`'s type checker proves the fake offers what a callback may use
    of the real runner (dsl.engine.contracts.RunnerView), so these tests test that contract."""
    return runner


def test_state_saved_under_a_former_callback_name_is_restored(tmp_path: Path) -> None:
    """A run checkpointed with `eval_basic` and resumed with `val_basic` keeps its best line."""
    from dsl.engine.callback_list import CallbackList

    runner = FakeRunner(tmp_path)
    first: Any = make("val_basic")
    second: Any = make("val_basic")
    CallbackList([first, second]).load_states(
        {"eval_basic": {"accuracy": 0.75, "step": 40}, "eval_basic.1": {"accuracy": 0.5, "step": 20}}, runner)
    assert (first.best, second.best) == ((0.75, 40), (0.5, 20))
    # The new name wins when both are there (a run saved after the rename).
    third: Any = make("val_basic")
    CallbackList([third]).load_states(
        {"val_basic": {"accuracy": 0.9, "step": 50}, "eval_basic": {"accuracy": 0.1, "step": 5}}, runner)
    assert third.best == (0.9, 50)


# ------------------------------------------------------------------- runner.divergence
def guard(**settings: Any) -> Callback:
    from dsl.engine.divergence import DivergenceGuard

    return DivergenceGuard(settings)


def test_divergence_stops_a_loss_that_explodes_in_the_first_epoch_naming_the_rate(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=4)
    losses = [2.3, 2.0, 30.0, 35.0, 40.0, 1.0]
    runner.run([guard(), make("train_basic")], sequence("loss", losses, learning_rate=0.1))
    assert runner.failed and runner.step == 5
    assert runner.stop_reason == (
        "the train loss diverged: 40 at step 5 is 17x its first value 2.3 (runner.divergence.factor 10); the learning "
        "rate is 0.1 (modeler.optimizer.learning_rate) with no warmup: lower modeler.optimizer.learning_rate, lengthen "
        "modeler.lr_schedule.warmup_epochs, or check the data (runner.divergence.action: warn or off to go on regardless)"
    )
    # train_basic's after_run saves no checkpoint of a failed run.
    assert runner.saves == []


def test_divergence_names_the_scaling_when_the_rate_was_scaled(tmp_path):
    from dsl.distributed.scaling import Scaling

    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=4, world_size=2)
    runner.scaling = Scaling(2, 4, 4, "linear", "linear", 2.0)
    runner.run([guard()], sequence("loss", [2.3, float("nan")], learning_rate=0.2))
    assert runner.failed and runner.stop_reason.startswith(
        "the train loss diverged: it is nan at step 2; the learning rate is 0.2 = 0.1 x 2 (the global batch 8 is 2x "
        "inputter.batch_size, runner.batch_scaling: linear, runner.lr_scaling: linear) with no warmup: set "
        "runner.batch_scaling: none")


def test_divergence_of_asynchronous_workers_names_the_rate_they_train_at(tmp_path):
    from dsl.distributed.scaling import Scaling

    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=4)
    runner.scaling = Scaling(1, 4, 4, "none", "staleness", 0.25, asynchronous_workers=4)
    runner.run([guard()], sequence("loss", [2.3, float("nan")], learning_rate=0.025))
    assert runner.failed and "the learning rate is 0.025 = 0.1 / 4 (4 asynchronous workers, " \
        "runner.async_lr_scaling: staleness) with no warmup: lower modeler.optimizer.learning_rate" in runner.stop_reason
    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=4)
    runner.scaling = Scaling(1, 4, 4, "none", "none", 1.0, asynchronous_workers=4)
    runner.run([guard()], sequence("loss", [2.3, float("nan")]))
    assert "the learning rate is 0.1 for each of 4 asynchronous workers (runner.async_lr_scaling: none) with no " \
        "warmup: set runner.async_lr_scaling: staleness" in runner.stop_reason


def test_divergence_warn_goes_on_and_off_or_after_the_window_says_nothing(tmp_path, capsys):
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=2)
    runner.run([guard(action="warn", patience=1)], sequence("loss", [1.0, 50.0, 60.0, 70.0]))
    assert not runner.failed and runner.step == 4
    assert capsys.readouterr().err.count("warning: the train loss diverged: 50 at step 2") == 1
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=2)
    runner.run([guard(action="off")], sequence("loss", [1.0, float("inf"), 60.0, 70.0]))
    assert not runner.failed
    # epochs: 1 watches the first epoch only: a jump in the second is not this guard's.
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=2)
    runner.run([guard(epochs=1, patience=1)], sequence("loss", [1.0, 2.0, 60.0, 70.0]))
    assert not runner.failed


def test_divergence_reference_survives_a_restart(tmp_path):
    first = guard()
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=2)
    runner.run([first], sequence("loss", [2.0, 3.0]))
    state: dict[str, Any] = {}
    first.before_save_checkpoint(runner, state)
    assert state == {"reference_loss": 2.0}
    resumed = guard(patience=1)
    resumed.after_load_checkpoint(runner, state)
    runner = FakeRunner(tmp_path, max_epochs=1, steps_per_epoch=2)
    runner.run([resumed], sequence("loss", [25.0, 1.0]))
    assert runner.failed and "25 at step 1 is 12x its first value 2" in runner.stop_reason


def test_divergence_watches_the_whole_run_and_a_small_first_loss_is_no_hair_trigger(tmp_path):
    """A run that starts trained (fine-tuning: first loss 0.05) may see 0.6 later: noise, not a
    divergence (the bar is never below the factor); the whole run is watched by default."""
    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=2)
    runner.run([guard()], sequence("loss", [0.05, 0.6, 0.3, 0.2, 0.1, 0.1]))
    assert not runner.failed
    runner = FakeRunner(tmp_path, max_epochs=3, steps_per_epoch=2)
    runner.run([guard(patience=1)], sequence("loss", [2.3, 2.0, 1.5, 1.0, 281.0, 1.0]))
    assert runner.failed and runner.step == 5 and "281 at step 5" in runner.stop_reason


def test_divergence_lets_a_spike_that_recovers_pass(tmp_path):
    """A batch-norm network at a high rate without warmup can spike in its first steps (the
    shipped cnn_iters at batch 16: 3.2, 25, then 4.6): fewer than `patience` calls above the bar."""
    runner = FakeRunner(tmp_path, max_epochs=2, steps_per_epoch=4)
    runner.run([guard()], sequence("loss", [3.2, 25.0, 40.0, 4.6, 3.0, 2.5, 50.0, 2.0]))
    assert not runner.failed and runner.step == 8


def test_checkpoint_best_of_a_relative_run_directory_missing_here_names_the_directory_it_was_read_in(tmp_path, monkeypatch):
    """Trial A16 ran `dslrun predict ../p.yaml --checkpoint best` from a sub-folder: "has no best model ...
    keeps one with save_best" sent them to a setting their pipeline had; the run lived beside the parent."""
    from dsl.engine.best import best_model_dir
    from dsl.language.errors import DslError

    (tmp_path / "runs" / "det").mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(DslError, match=r"--checkpoint best: runs/det does not exist relative to this directory "
                                       rf"\({tmp_path / 'sub'}\), where runner.model_dir is read from"):
        best_model_dir(Path("runs/det"))
    monkeypatch.chdir(tmp_path)  # the run is here, without a best model: the save_best hint stands
    with pytest.raises(DslError, match=r"runs/det has no best model .* keeps one with save_best"):
        best_model_dir(Path("runs/det"))
