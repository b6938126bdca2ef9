"""The one training loop every backend shares, and the state callbacks see.

The runner walks the workflow (mmcv's `[[train, 2], [val, 1]]`), calls the compiled step
functions, and calls every hook at each point. It never branches on the backend: the
backend only shards data, wraps the gradient tape, broadcasts and reduces.

State that must survive a restart — model, optimizer, step, data epoch and the position
inside it — lives in one `tf.train.Checkpoint`; the data order of each epoch is derived
from (seed, epoch), so the position is two integers instead of a saved shuffle buffer.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tensorflow as tf

from backends.base import Backend
from dsl.engine.compiler import CompiledPipeline, use_jit
from dsl.engine.compiler import steps_per_epoch as count_steps_per_epoch
from dsl.engine.phases import Phase, plan_phases
from dsl.engine.precision import loss_scale_variables, with_loss_scaling
from dsl.engine.resize import ShiftedSchedule, batches_done, schedule_offset
from dsl.engine.rundir import MetricsFile
from dsl.engine.watch import clear_done, mark_done
from dsl.errors import DslError
from dsl.hooks import Hook, sort_hooks


class Runner:
    """Drives one process's share of the training; see docs/callbacks API in dsl/hooks.py."""

    def __init__(self, compiled: CompiledPipeline, backend: Backend, *, seed: int, resume: bool = True,
                 resume_from: str | None = None) -> None:
        spec = compiled.spec
        params = spec["runner"]
        self.compiled = compiled
        self.pipeline = spec
        self.context = compiled.context
        self.backend = backend
        self.placement = backend.placement
        self.model_dir = Path(params["model_dir"])
        self.model = compiled.model
        self.modeler = compiled.modeler
        self.inputter = compiled.inputter
        self.augmenter = compiled.augmenter
        self.hooks = compiled.hooks
        self.seed = seed
        self._resume = resume
        self._resume_from = resume_from

        self.workflow = [tuple(phase) for phase in params["workflow"]]
        self.max_epochs: int | None = params.get("max_epochs")
        self.max_iters: int | None = params.get("max_iters")
        self.by_epoch = self.max_epochs is not None
        self.steps_per_call: int = params["steps_per_call"]
        self.batch_size: int = spec["inputter"]["batch_size"]
        self.global_batch_size = self.batch_size * self.placement.world_size
        self.steps_per_epoch: int | None = self.context.steps_per_epoch
        self._check_data()

        self.jit_compile = use_jit(params["jit_compile"])
        self.traces: Counter = Counter()
        with backend.scope():
            self.optimizer = with_loss_scaling(self.modeler.optimizer(self.steps_per_epoch, backend.lr_scale()))
            self.optimizer.build(self.model.trainable_variables)
            self.metrics = {mode: self._fresh_metrics(mode) for mode in ("train", "val")}
            self._state = {
                "step": tf.Variable(0, dtype=tf.int64, trainable=False, name="step"),
                "epoch": tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch"),
                "data_position": tf.Variable(0, dtype=tf.int64, trainable=False, name="data_position"),
            }
        self._train_call = backend.make_train_call(self)
        self._eval_call = backend.make_eval_call(self)

        # Position: train steps done, data epochs done, batches consumed in the current epoch.
        self.step = 0
        self.epoch = 0
        self.data_position = 0
        self._generators = random_generators(self.model)
        rng = {"rng": self._generators} if self._generators else {}
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, **self._state, **rng)
        self.checkpoint_manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.model_dir / "checkpoints"), max_to_keep=self._max_to_keep()
        )
        self.metrics_file = MetricsFile(self.model_dir, params["metrics_format"]) if self.placement.is_chief else None
        self._writers: dict[str, Any] = {}
        self._iterator: Iterator | None = None
        self._graph_args: tuple | None = None
        self._last_saved_step = -1
        self._world_built = self.placement.world_size
        self._writers_for_chief = self.placement.is_chief

        self.mode = "train"
        self.inner_step = 0
        self.phase_steps: int | None = None
        self.outputs: dict[str, float] = {}
        self.phase_outputs: dict[str, float] = {}
        self.history: list[dict[str, Any]] = []
        self.iter_seconds = 0.0
        self.should_stop = False
        self.failed = False
        self.stop_reason = ""
        self.resumed = False
        self.restored_from: str | None = None
        self._signal = 0  # SIGTERM/SIGINT received: save and exit 128 + signal

    # ----------------------------------------------------------------- public API for hooks
    def request_stop(self, reason: str) -> None:
        """End training after the current call; `reason` is printed."""
        self.should_stop = True
        self.stop_reason = self.stop_reason or reason

    def fail(self, reason: str) -> None:
        """End training now and exit non-zero (e.g. a NaN loss)."""
        self.failed = True
        self.request_stop(reason)

    def save_checkpoint(self) -> str | None:
        """Write all training state (chief only); returns the checkpoint path."""
        if not self.placement.is_chief:
            return None
        if self._last_saved_step == self.step and self.checkpoint_manager.latest_checkpoint:
            return self.checkpoint_manager.latest_checkpoint
        self._state["step"].assign(self.step)
        self._state["epoch"].assign(self.epoch)
        self._state["data_position"].assign(self.data_position)
        path = self.checkpoint_manager.save(checkpoint_number=self.step)
        self._last_saved_step = self.step
        return path

    def summary_writer(self, mode: str) -> Any:
        """TensorBoard writer for `mode` (model_dir/tensorboard/<mode>); a no-op writer off the chief."""
        if mode not in self._writers:
            if self.placement.is_chief:
                self._writers[mode] = tf.summary.create_file_writer(str(self.model_dir / "tensorboard" / mode))
            else:
                self._writers[mode] = tf.summary.create_noop_writer()
        return self._writers[mode]

    def train_graph_def(self) -> Any:
        """The compiled train call's GraphDef (after the first call), for TensorBoard's Graphs tab."""
        if self._graph_args is None:
            return None
        return self._train_call.get_concrete_function(*self._graph_args).graph.as_graph_def()

    def log_metrics(self, mode: str, values: dict[str, Any]) -> None:
        """Append a record (with step and epoch) to the run's metrics file, on the chief."""
        if self.metrics_file is not None:
            self.metrics_file.write({"mode": mode, "epoch": self.epoch, "step": self.step, **values})

    def print(self, message: str) -> None:
        """Print on the chief only, so N ranks do not print N copies."""
        if self.placement.is_chief:
            print(message, flush=True)

    def notice(self, message: str) -> None:
        """dslrun's own status lines (resumed, interrupted, stopped): stderr, chief only,
        so that stdout of eval/predict stays machine-readable."""
        if self.placement.is_chief:
            print(f"dslrun: {message}", file=sys.stderr, flush=True)

    def add_hook(self, hook: Hook) -> None:
        """Add a hook of dslrun's own (a backend's), keeping the calling order by priority."""
        self.hooks = sort_hooks([*self.hooks, hook])

    def state_variables(self) -> list[tf.Variable]:
        """Every variable a restart must restore: model, optimizer (slots, step count, loss scale), RNG."""
        return (list(self.model.variables) + list(self.optimizer.variables) + loss_scale_variables(self.optimizer)
                + [generator.state for generator in self._generators])

    def position(self) -> dict[str, int]:
        """Where training stands, in units that survive a change of the number of ranks."""
        return {"step": self.step, "epoch": self.epoch, "epoch_examples": self.data_position * self.global_batch_size}

    def enter_world(self, step: int, epoch: int, epoch_examples: int) -> None:
        """Continue from `position()` values with the ranks there are now (Horovod elastic).

        With another number of ranks the global batch, the steps per epoch and the learning-
        rate scale change: the data is sharded anew, the schedule rebuilt (shifted so an
        epoch-based run keeps its progress through it) and the step functions traced again.
        """
        world = self.placement.world_size
        resized = world != self._world_built
        if resized:
            self._world_built = world
            self.global_batch_size = self.batch_size * world
            self.steps_per_epoch = count_steps_per_epoch(
                self.inputter.num_examples("train"), self.batch_size, world,
                self.pipeline["inputter"].get("drop_remainder", True),
            )
            self.context.steps_per_epoch = self.steps_per_epoch
            self._check_data()
        self.step, self.epoch = step, epoch
        self.data_position = batches_done(epoch_examples, self.global_batch_size, self.steps_per_epoch)
        self._iterator = None
        if resized:
            offset = schedule_offset(self.by_epoch, epoch, self.data_position, self.steps_per_epoch,
                                     int(self.optimizer.iterations.numpy()))
            schedule = self.modeler.learning_rate(self.steps_per_epoch, self.backend.lr_scale())
            self.optimizer.learning_rate = ShiftedSchedule(schedule, offset) if offset else schedule
            self._train_call = self.backend.make_train_call(self)
            self._eval_call = self.backend.make_eval_call(self)
            self._graph_args = None
        if self.placement.is_chief and self.metrics_file is None:
            self.metrics_file = MetricsFile(self.model_dir, self.pipeline["runner"]["metrics_format"])
        if self.placement.is_chief != self._writers_for_chief:
            for writer in self._writers.values():
                writer.flush()
            self._writers = {}
            self._writers_for_chief = self.placement.is_chief

    # ------------------------------------------------------------------------- the loop
    def run(self) -> int:
        """Train through the workflow; returns the process exit status."""
        other_work = self.backend.run_task(self)
        if other_work is not None:
            return other_work
        if self.placement.is_chief:
            clear_done(self.model_dir)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.restore()
            self._call("before_run")
            self.backend.run_training(self, self._train_workflow)
            if self.placement.is_chief and not self._signal and not self.failed:
                mark_done(self.model_dir, self.step, self.checkpoint_manager.latest_checkpoint)
        except tf.errors.OpError as exc:
            raise _explain_op_error(exc, self) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for writer in self._writers.values():
                writer.flush()
        if self._signal:
            path = self.save_checkpoint()
            name = signal.Signals(self._signal).name
            where = f"saved a checkpoint at step {self.step} in {path}" if path else "the chief saves the checkpoint"
            self.notice(f"interrupted by {name}: {where}; run the same command to resume")
            return 128 + self._signal
        if self.stop_reason:
            self.notice(f"{'failed' if self.failed else 'stopped'}: {self.stop_reason}")
        return 1 if self.failed else 0

    def restore(self, weights_only: bool = False) -> None:
        """Resume from `--resume-from`, else the run directory's newest usable checkpoint, else start fresh.

        A damaged newest checkpoint (truncated, garbled, a file missing) is reported and the
        one before it is used; when none is usable the run stops instead of silently
        starting over. A `--resume-from` checkpoint is used or refused, never replaced.
        `weights_only` (eval, predict, export) reads the model and the position and leaves
        the optimizer alone: its slots need not fit (a ps run saves them per shard).
        """
        reader = self.weights_checkpoint() if weights_only else self.checkpoint
        candidates, explicit = self._checkpoint_to_restore()
        path = None
        for candidate in candidates:
            problem = self._restore_from(candidate, reader, partial=weights_only)
            if problem is None:
                path = candidate
                break
            if explicit:
                raise DslError(f"--resume-from {candidate}: the checkpoint cannot be read ({problem}); "
                               "give another checkpoint, or --no-resume to start fresh")
            self.notice(f"warning: checkpoint {candidate} cannot be read ({problem}); trying the one before it")
        if candidates and path is None:
            directory = self.model_dir / "checkpoints"
            raise DslError(
                f"no usable checkpoint in {directory}: all {len(candidates)} listed in its `checkpoint` file are "
                "damaged or missing; move the directory aside and rerun to start fresh, or pass --resume-from PATH"
            )
        self.resumed = path is not None
        self.restored_from = path
        # Every rank starts from the chief's weights and position (a restore may exist on one host only).
        self.backend.broadcast(self.state_variables() + list(self._state.values()))
        self.step = int(self._state["step"].numpy())
        self.epoch = int(self._state["epoch"].numpy())
        self.data_position = int(self._state["data_position"].numpy())
        self._last_saved_step = self.step if path else -1
        if path:
            self.notice(f"resumed from {path} at step {self.step} (epoch {self.epoch})")

    def weights_checkpoint(self) -> tf.train.Checkpoint:
        """A reader of the model and the position in a training checkpoint, without the optimizer."""
        return tf.train.Checkpoint(model=self.model, **self._state)

    def _restore_from(self, path: str, reader: tf.train.Checkpoint, partial: bool = False) -> str | None:
        """Load `reader`'s variables from `path`; None on success, else why the files are unusable.

        A checkpoint that reads fine but does not fit the pipeline is an error, not damage:
        older checkpoints would not fit either. A read that fails half-way may have set some
        variables; the next candidate sets every one of them again (each checkpoint holds
        all training state), so nothing of the damaged one survives.
        """
        try:
            status = reader.restore(path)
        except ValueError as exc:
            if "incompatible tensor with shape" in str(exc):
                raise self._does_not_fit(path, exc) from None
            return f"{type(exc).__name__}: {_first_line(exc)}"
        except (tf.errors.OpError, IndexError, KeyError, OSError) as exc:
            # What TensorFlow's reader raises for missing, truncated and garbled files.
            return f"{type(exc).__name__}: {_first_line(exc)}"
        if partial:
            status.expect_partial()
        try:
            status.assert_existing_objects_matched()
        except AssertionError as exc:
            raise self._does_not_fit(path, exc) from None
        return None

    @staticmethod
    def _does_not_fit(path: str, exc: Exception) -> DslError:
        return DslError(
            f"checkpoint {path} does not fit this pipeline (the network or optimizer changed?): "
            f"{_first_line(exc)}; use --no-resume or another runner.model_dir"
        )

    def evaluate(self, mode: str = "val", max_steps: int | None = None) -> dict[str, float]:
        """One pass over `mode`'s data with the current weights; the values averaged across ranks."""
        for metric in self.metrics["val"].values():
            metric.reset_state()
        steps, examples = self._eval_share(mode, max_steps)
        if steps == 0:
            raise DslError(f"the {mode} data of this rank is empty; check inputter.{mode}")
        iterator = self.backend.make_iterator(lambda: self.inputter.dataset(
            mode, self.augmenter.eval, self.backend.num_shards, self.backend.shard_index, seed=self.seed
        ))
        outputs = self._eval_call(iterator, tf.constant(steps, tf.int32))
        # Weighted by the examples each rank evaluated: N ranks report what one process would.
        return self.backend.reduce_metrics({k: float(v) for k, v in outputs.items()}, weight=examples)

    # ------------------------------------------------------------------------ internals
    def _train_workflow(self) -> None:
        """The workflow from the current position to the end; run again after an elastic reset."""
        for phase in plan_phases(self.workflow, self.max_epochs or self.max_iters, self.by_epoch):
            if self.should_stop:
                break
            self._run_phase(phase)
        self._call("after_run")
        if not self._signal:
            self._check_replicas_agree()

    def _run_phase(self, phase: Phase) -> None:
        if phase.mode == "val":
            if phase.start == self._units_done():
                self._val_phase()
            return
        if phase.start + phase.count <= self._units_done():
            return
        if self.by_epoch:
            self._train_phase(self.steps_per_epoch - self.data_position)
        else:
            self._train_phase(phase.start + phase.count - self.step)

    def weights_digest(self) -> str:
        """SHA-256 of every model variable's bytes: equal digests mean identical weights."""
        digest = hashlib.sha256()
        for variable in self.model.variables:
            digest.update(variable.name.encode())
            digest.update(variable.numpy().tobytes())
        return digest.hexdigest()

    def _check_replicas_agree(self) -> None:
        """With several replicas, prove they ended with the same weights (or say they did not)."""
        if self.placement.world_size == 1:
            return
        digests = self.backend.gather_strings(self.weights_digest())
        if len(set(digests)) == 1:
            self.notice(f"weights digest {digests[0][:16]} identical on all {len(digests)} ranks")
        else:
            differing = [rank for rank, d in enumerate(digests) if d != digests[0]]
            self.fail(f"the ranks ended with different weights (ranks {differing} differ from rank 0)")

    def _agree_on_stopping(self) -> None:
        """Every rank stops at the same step: one rank's reason stops them all."""
        mine = 3 if self._signal else 2 if self.failed else 1 if self.should_stop else 0
        agreed = self.backend.max_across_ranks(mine)
        if agreed > mine:
            self._signal = signal.SIGTERM if agreed == 3 else 0
            self.failed = agreed == 2
            self.request_stop(["", "another rank stopped the run", "another rank failed", "another rank was interrupted"][agreed])

    def _units_done(self) -> int:
        return self.epoch if self.by_epoch else self.step

    def _train_phase(self, num_steps: int) -> None:
        self.mode, self.inner_step, self.phase_steps = "train", 0, num_steps
        for metric in self.metrics["train"].values():
            metric.reset_state()
        started = time.perf_counter()
        self._call("before_train_epoch")
        while self.inner_step < num_steps and not self.should_stop:
            iterator, count = self._next_chunk(min(self.steps_per_call, num_steps - self.inner_step))
            self._call("before_train_iter")
            tick = time.perf_counter()
            outputs = self._train_call(iterator, tf.constant(count, tf.int32))
            self.outputs = {name: float(value) for name, value in outputs.items()}
            self.iter_seconds = time.perf_counter() - tick
            if self._graph_args is None:
                self._graph_args = (iterator, tf.constant(count, tf.int32))
            self._advance(count)
            self._call("after_train_iter")
            self._agree_on_stopping()
        values = {name: float(metric.result()) for name, metric in self.metrics["train"].items()}
        values["learning_rate"] = self.outputs.get("learning_rate", 0.0)
        self._finish_phase("train", values, time.perf_counter() - started)
        self._call("after_train_epoch")

    def _val_phase(self) -> None:
        self.mode, self.inner_step = "val", 0
        self.phase_steps = self._eval_steps("val", self.pipeline["runner"].get("val_steps"))
        started = time.perf_counter()
        self._call("before_val_epoch")
        tick = time.perf_counter()
        self.outputs = self.evaluate("val", self.pipeline["runner"].get("val_steps"))
        self.iter_seconds = time.perf_counter() - tick
        self.inner_step = self.phase_steps
        self._call("after_val_iter")
        self._finish_phase("val", dict(self.outputs), time.perf_counter() - started)
        self._call("after_val_epoch")
        self.mode = "train"

    def _finish_phase(self, mode: str, values: dict[str, float], seconds: float) -> None:
        self.phase_outputs = self.backend.reduce_metrics(values) if mode == "train" else values
        skipped = self._skipped_examples(mode)
        if skipped is not None:
            self.phase_outputs["skipped_examples"] = skipped
        self.history.append({"mode": mode, "epoch": self.epoch, "step": self.step, **self.phase_outputs})
        self.log_metrics(mode, {**self.phase_outputs, "seconds": round(seconds, 3)})

    def _skipped_examples(self, mode: str) -> int | None:
        """Examples of `mode` that `inputter.skip_corrupt` left out (for the metrics file);
        None when skipping is off or the inputter cannot count them up front."""
        skipped = getattr(self.inputter, "skipped", None)
        if not self.pipeline["inputter"].get("skip_corrupt") or skipped is None:
            return None
        return len(skipped.get(mode, []))

    def _next_chunk(self, wanted: int) -> tuple[Any, int]:
        """The iterator positioned at the next batch, and how many steps it can still give."""
        if self._iterator is None:
            self._iterator = self.backend.make_iterator(self._train_dataset_fn(self.epoch, self.data_position))
        return self._iterator, min(wanted, self.steps_per_epoch - self.data_position)

    def _advance(self, count: int) -> None:
        self.step += count
        self.inner_step += count
        self.data_position += count
        if self.data_position >= self.steps_per_epoch:
            # The data epoch is complete: hooks at after_train_epoch see it counted.
            self.epoch += 1
            self.data_position = 0
            self._iterator = None

    def _train_dataset_fn(self, epoch: int, skip: int) -> Any:
        """Builds this rank's train data of `epoch`, positioned after `skip` batches (resume)."""

        def dataset_fn() -> Any:
            dataset = self.inputter.dataset(
                "train", self.augmenter.train, self.backend.num_shards, self.backend.shard_index,
                seed=self._epoch_seed(epoch),
            )
            return dataset.skip(skip) if skip else dataset

        return dataset_fn

    def _epoch_seed(self, epoch: int) -> int:
        return (self.seed * 1_000_003 + epoch * 7_919) % (2**31 - 1)

    def _eval_steps(self, mode: str, max_steps: int | None) -> int:
        return self._eval_share(mode, max_steps)[0]

    def _eval_share(self, mode: str, max_steps: int | None) -> tuple[int, int]:
        """This rank's eval batches and the examples they hold (`max_steps` may cut both)."""
        total = self.inputter.num_examples(mode)
        world, rank = self.backend.num_shards, self.backend.shard_index
        mine = (total - rank + world - 1) // world  # examples of this rank's shard
        steps = -(-mine // self.batch_size)
        if max_steps:
            steps = min(steps, max_steps)
        return steps, min(mine, steps * self.batch_size)

    def _fresh_metrics(self, mode: str) -> dict[str, Any]:
        metrics = {"loss": tf.keras.metrics.Mean(name=f"{mode}_loss")}
        metrics.update(self.modeler.metrics(mode))
        return metrics

    def _check_data(self) -> None:
        if not self.inputter.has_source("train"):
            raise DslError("the inputter has no train data; set inputter.train")
        if not self.steps_per_epoch:
            examples = self.inputter.num_examples("train")
            raise DslError(
                f"inputter.batch_size {self.batch_size} x {self.placement.world_size} process(es) is larger "
                f"than the train data ({examples} examples): not one full batch per epoch; lower "
                "inputter.batch_size or set inputter.drop_remainder: false"
            )

    def _max_to_keep(self) -> int:
        for params in self.pipeline.get("callbacks", []):
            if params["type"] == "checkpoint":
                return int(params.get("max_to_keep", 5))
        return 5

    def _checkpoint_to_restore(self) -> tuple[list[str], bool]:
        """The checkpoints to try, newest first, and whether the user named the one to use."""
        if self._resume_from:
            return [resolve_checkpoint(self._resume_from, "--resume-from")], True
        if not self._resume:
            self._set_aside_old_checkpoints()
            return [], False
        listed = list(self.checkpoint_manager.checkpoints)
        latest = self.checkpoint_manager.latest_checkpoint
        if latest and latest not in listed:
            listed.append(latest)
        return listed[::-1], False

    def _set_aside_old_checkpoints(self) -> None:
        """--no-resume: keep the old checkpoints (renamed) instead of mixing or deleting them."""
        directory = self.model_dir / "checkpoints"
        if self.placement.is_chief and directory.exists() and any(directory.iterdir()):
            target = directory.with_name(f"checkpoints.old-{time.strftime('%Y%m%d-%H%M%S')}")
            directory.rename(target)
            self.notice(f"--no-resume: moved the old checkpoints to {target}")
            self.checkpoint_manager = tf.train.CheckpointManager(
                self.checkpoint, str(directory), max_to_keep=self._max_to_keep()
            )

    def _call(self, point: str) -> None:
        for hook in self.hooks:
            if hook.chief_only and not self.placement.is_chief:
                continue
            getattr(hook, point)(self)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Stop after the current call and save; a second signal ends the process at once."""
        self._signal = signum
        self.request_stop(f"interrupted by {signal.Signals(signum).name}")
        signal.signal(signum, signal.SIG_DFL)


def random_generators(model: Any) -> list[tf.random.Generator]:
    """The `tf.random.Generator` of every layer that draws random numbers (dropout), in layer order.

    Keras keeps them out of the model's checkpoint; the runner saves them itself, so that a
    resumed deterministic run draws the same dropout masks as an uninterrupted one.
    """
    found = []
    for layer in model.submodules:
        generator = getattr(getattr(layer, "_random_generator", None), "_generator", None)
        if isinstance(generator, tf.random.Generator):
            found.append(generator)
    return found


def resolve_checkpoint(path: str, option: str) -> str:
    """A checkpoint prefix from a prefix or a directory; an error when there is none."""
    candidate = Path(path)
    if candidate.is_dir():
        latest = tf.train.latest_checkpoint(str(candidate))
        if latest is None:
            raise DslError(f"{option} {path}: the directory holds no checkpoint")
        return latest
    if Path(f"{path}.index").exists():
        return path
    raise DslError(f"{option} {path}: no such checkpoint (expected a directory or a prefix with {path}.index)")


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, without TensorFlow's op details."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return message.strip().splitlines()[0].split(" [Op:")[0]


def _explain_op_error(exc: tf.errors.OpError, runner: Runner) -> DslError:
    """A TensorFlow runtime error as one line: which file (from the inputter) or which step."""
    try:
        from dsl.inputters._pipeline import explain_data_error
    except ImportError:  # pragma: no cover - the inputters always ship it
        explain_data_error = None
    if explain_data_error is not None:
        explained = explain_data_error(exc)
        if explained is not None:
            return explained
    message = (exc.message or str(exc)).strip().splitlines()[0]
    return DslError(f"TensorFlow failed in the {runner.mode} phase at step {runner.step}: {message}")

