"""The one training loop every backend shares, and the state callbacks see.

The runner walks the workflow (mmcv's `[[train, 2], [val, 1]]`), calls the compiled step
functions, and calls every callback at each point. It never branches on the backend: the
backend only shards data, wraps the gradient tape, broadcasts and reduces.

State that must survive a restart — model, optimizer, step, data epoch and the position
inside it — lives in one `tf.train.Checkpoint`; the data order of each epoch is derived
from (seed, epoch), so the position is two integers instead of a saved shuffle buffer.
What the tensors do not hold — the val phases done at the checkpoint's step and the
callbacks' state (patience, best so far) — lies beside it (dsl/engine/resume_state.py).
"""

from __future__ import annotations

import hashlib
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tensorflow as tf

from backends.base import Backend
from dsl.callbacks.base import Callback, sort_callbacks
from dsl.engine.compiler import CompiledPipeline, use_jit
from dsl.engine.compiler import steps_per_epoch as count_steps_per_epoch
from dsl.engine.phases import Phase, plan_phases
from dsl.engine.precision import loss_scale_variables, with_loss_scaling
from dsl.engine.resize import ShiftedSchedule, batches_done, schedule_offset
from dsl.engine.resume_state import read_state, sweep_states, write_state
from dsl.engine.rundir import MetricsFile
from dsl.engine.watch import clear_done, mark_done, read_done
from dsl.errors import DslError

ALL_PHASES = 1 << 30  # more val phases than any workflow runs at one position


class Runner:
    """Drives one process's share of the training; see docs/callbacks API in dsl/callbacks.py."""

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
        self.callbacks = compiled.callbacks
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
        # The chief's [resumed, val phases done at the restored step, a callback ended the run]:
        # broadcast with the position so that every rank plans the same phases, or none (a rank
        # that went on alone would wait in a collective).
        self._resume_flags = tf.Variable([0, 0, 0], dtype=tf.int64, trainable=False, name="resume_flags")
        self._train_call = backend.make_train_call(self)
        self._eval_call = backend.make_eval_call(self)

        # Position: train steps done, data epochs done, batches consumed in the current epoch.
        self.step = 0
        self.epoch = 0
        self.data_position = 0
        self._vals_done = 0  # val phases run at the current position (since the last train unit ended)
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
        self._last_saved: tuple[str, dict[str, Any] | None] | None = None  # (checkpoint, its state file's content)
        self._loaded_state: dict[str, Any] | None = None  # the state file of the restored checkpoint
        self._world_built = self.placement.world_size
        self._schedule_offset = 0  # steps the learning-rate schedule is shifted by (elastic resizes)
        self._writers_for_chief = self.placement.is_chief
        self._started_callbacks: set[int] = set()  # ids of the callbacks whose before_run has run
        self._callbacks_started = False  # the runner's before_run point has come

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
        self.already_finished: str | None = None  # why a re-run had nothing to do
        self.restored_from: str | None = None
        # Where the restored weights were taken (None for a best/ checkpoint without best.json).
        self.restored_step: int | None = None
        self.restored_epoch: int | None = None
        self._signal = 0  # SIGTERM/SIGINT received: save and exit 128 + signal

    # ----------------------------------------------------------------- public API for callbacks
    def request_stop(self, reason: str) -> None:
        """End training after the current call; `reason` is printed."""
        self.should_stop = True
        self.stop_reason = self.stop_reason or reason

    def fail(self, reason: str) -> None:
        """End training now and exit non-zero (e.g. a NaN loss)."""
        self.failed = True
        self.request_stop(reason)

    def save_checkpoint(self) -> str | None:
        """Write all training state (chief only); returns the checkpoint path.

        Called again at the same step (the val phase after an epoch's checkpoint, the final
        save), only the state file beside the checkpoint is replaced, if it changed.
        """
        if not self.placement.is_chief:
            return None
        state = self._resume_state()
        if self._last_saved is not None and self._last_saved_step == self.step:
            path, saved = self._last_saved
            if state != saved:
                write_state(path, state)
                self._last_saved = (path, state)
            return path
        self._state["step"].assign(self.step)
        self._state["epoch"].assign(self.epoch)
        self._state["data_position"].assign(self.data_position)
        directory = self.model_dir / "checkpoints"
        # Before the checkpoint: CheckpointManager lists it last, so a listed checkpoint has its state.
        write_state(directory / f"ckpt-{self.step}", state)
        path = self.checkpoint_manager.save(checkpoint_number=self.step)
        sweep_states(directory, self.checkpoint_manager.checkpoints)
        self._last_saved_step, self._last_saved = self.step, (path, state)
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

    def add_callback(self, callback: Callback) -> None:
        """Add a callback of dslrun's own (a backend's), keeping the calling order by priority."""
        self.callbacks = sort_callbacks([*self.callbacks, callback])

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
        if (step, epoch) != (self.step, self.epoch):
            self._vals_done = 0  # rolled back: run the val phases there again rather than skip one
        self.step, self.epoch = step, epoch
        self.data_position = batches_done(epoch_examples, self.global_batch_size, self.steps_per_epoch)
        self._iterator = None
        # From the broadcast position, so that a rank that joined (built for this world, never
        # shifted) and the survivors (rebuilt at every resize) follow one schedule.
        offset = schedule_offset(self.by_epoch, epoch, self.data_position, self.steps_per_epoch,
                                 int(self.optimizer.iterations.numpy()))
        if resized or offset != self._schedule_offset:
            self._schedule_offset = offset
            schedule = self.modeler.learning_rate(self.steps_per_epoch, self.backend.lr_scale())
            self.optimizer.learning_rate = ShiftedSchedule(schedule, offset) if offset else schedule
            self._train_call = self.backend.make_train_call(self)
            self._eval_call = self.backend.make_eval_call(self)
            self._graph_args = None
        if self.placement.is_chief and self.metrics_file is None:
            self.metrics_file = MetricsFile(self.model_dir, self.pipeline["runner"]["metrics_format"])
        if self.placement.is_chief:
            self._start_skipped_callbacks()
        if self.placement.is_chief != self._writers_for_chief:
            for writer in self._writers.values():
                writer.flush()
            self._writers = {}
            self._writers_for_chief = self.placement.is_chief

    # ------------------------------------------------------------------------- the loop
    def run(self, on_start: Callable[[], None] | None = None) -> int:
        """Train through the workflow; returns the process exit status.

        A run already at its end (the same command run again) writes nothing and exits 0.
        `on_start` is called once training will happen (the run command stores pipeline.yaml then).
        """
        other_work = self.backend.run_task(self)
        if other_work is not None:
            return other_work
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.restore()
            self.already_finished = self._finished()
            if self.already_finished:
                self.notice(self.already_finished)
                return 0
            self._start(on_start)
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

    def _start(self, on_start: Callable[[], None] | None) -> None:
        if self.resumed:
            self.notice(f"resumed from {self.restored_from} at step {self.step} (epoch {self.epoch})")
        if self.placement.is_chief:
            clear_done(self.model_dir)
        if on_start is not None:
            on_start()

    def _finished(self) -> str | None:
        """Why a resumed run has nothing left to do, or None. Every rank decides alike: the
        position and the resume flags are the chief's (broadcast by `restore`)."""
        if not self.resumed:
            return None
        where = f"already finished at step {self.step} ({self.model_dir})"
        if self.should_stop:  # a callback's restored state ends the run (early stopping's patience is spent)
            return f"{where}: {self.stop_reason}"
        key, unit, total = ("max_epochs", "epoch", self.max_epochs) if self.by_epoch else ("max_iters", "step", self.max_iters)
        done = self._units_done()
        if done < total or (done == total and self._vals_done < self._val_phases_at(total)):
            return None
        if done > total:
            return f"{where}: it is at {unit} {done}, beyond runner.{key} {total}; raise runner.{key} to train further"
        return f"{where}; raise runner.{key} ({total}) to train further"

    def _val_phases_at(self, units: int) -> int:
        """How many val phases the workflow runs when `units` train units are done."""
        plan = plan_phases(self.workflow, self.max_epochs or self.max_iters, self.by_epoch)
        return sum(1 for phase in plan if phase.mode == "val" and phase.start == units)

    def restore(self, weights_only: bool = False, option: str = "--resume-from") -> None:
        """Resume from `option` (`--resume-from`), else the run directory's newest usable checkpoint, else start fresh.

        A damaged newest checkpoint (truncated, garbled, a file missing) is reported and the
        one before it is used; when none is usable the run stops instead of silently
        starting over. A checkpoint the user named is used or refused, never replaced.
        `weights_only` (eval, predict, export, whose flag is `--checkpoint`) reads the model
        and the position and leaves the optimizer alone: its slots need not fit (a ps run
        saves them per shard); it also takes a checkpoint of the model alone (best/).
        """
        candidates, explicit = self._checkpoint_to_restore(option)
        if explicit and not holds_training_state(candidates[0]):
            self._restore_model_only(candidates[0], option, weights_only)
            return
        path = self._restore_newest_usable(candidates, explicit, weights_only, option)
        self.restored_from = path
        vals_done = self._read_resume_state(path) if not weights_only else 0
        self._resume_flags.assign([int(path is not None), vals_done, int(self.should_stop)])
        # Every rank starts from the chief's weights, position and resume flags (a restore may
        # exist on one host only).
        self.backend.broadcast(self.state_variables() + list(self._state.values()) + [self._resume_flags])
        self.step = int(self._state["step"].numpy())
        self.epoch = int(self._state["epoch"].numpy())
        self.data_position = int(self._state["data_position"].numpy())
        resumed, self._vals_done, stopped = (int(value) for value in self._resume_flags.numpy())
        self.resumed = bool(resumed)
        if stopped and not self.should_stop:
            self.request_stop("a callback of the chief ended the run")
        listed = path is not None and self._is_listed(path)
        self._last_saved_step = self.step if path else -1
        self._last_saved = (path, self._loaded_state) if listed else None
        if path:
            self.restored_step, self.restored_epoch = self.step, self.epoch
        if path and weights_only:
            self.notice(f"using checkpoint {path} (step {self.step})")

    def _restore_newest_usable(self, candidates: list[str], explicit: bool, weights_only: bool,
                               option: str) -> str | None:
        """The first of `candidates` that restores; damaged ones are skipped unless the user named it."""
        reader = self.weights_checkpoint() if weights_only else self.checkpoint
        for candidate in candidates:
            problem = self._restore_from(candidate, reader, weights_only, option)
            if problem is None:
                return candidate
            if explicit:
                fresh = ", or --no-resume to start fresh" if option == "--resume-from" else ""
                raise DslError(f"{option} {candidate}: the checkpoint cannot be read ({problem}); "
                               f"give another checkpoint{fresh}")
            self.notice(f"warning: checkpoint {candidate} cannot be read ({problem}); trying the one before it")
        if candidates:
            directory = self.model_dir / "checkpoints"
            raise DslError(
                f"no usable checkpoint in {directory}: all {len(candidates)} listed in its `checkpoint` file are "
                f"damaged or missing; move the directory aside and rerun to start fresh, or pass {option} PATH"
            )
        return None

    def _restore_model_only(self, path: str, option: str, weights_only: bool) -> None:
        """A checkpoint of the model alone (checkpoint.save_best's best/ckpt-N): it serves eval,
        predict and export; the step it was taken at comes from best.json beside it."""
        from dsl.callbacks._best import record_of

        if not weights_only:
            raise DslError(
                f"{option} {path}: the checkpoint holds the model's weights only (as checkpoint.save_best writes "
                f"them), not the training state; resume from {self.model_dir / 'checkpoints'}, or start a new "
                f"run from these weights with callbacks: [{{type: init_checkpoint, path: {path}}}]"
            )
        problem = self._restore_from(path, tf.train.Checkpoint(model=self.model), True, option)
        if problem is not None:
            raise DslError(f"{option} {path}: the checkpoint cannot be read ({problem}); give another checkpoint")
        self.backend.broadcast(list(self.model.variables))
        record = record_of(path) or {}
        self.resumed, self.restored_from = True, path
        self.restored_step, self.restored_epoch = record.get("step"), record.get("epoch")
        self.step, self.epoch = self.restored_step or 0, self.restored_epoch or 0
        if "step" in record:
            detail = f"step {record['step']}, best {record.get('monitor')} {record.get('value')}"
        else:
            detail = "step unknown: no best.json beside it describes it"
        self.notice(f"using checkpoint {path} ({detail})")

    def _read_resume_state(self, path: str | None) -> int:
        """Load the callbacks' state from the file beside the checkpoint; returns the val phases
        done at the restored step."""
        self._loaded_state = None
        if path is None:
            return 0
        step = int(self._state["step"].numpy())
        self._loaded_state = read_state(path, step)
        if self._loaded_state is None:
            return self._vals_done_by_marker(path, step)
        self._load_callback_states(self._loaded_state.get("callbacks", {}))
        return int(self._loaded_state.get("val_phases_done", 0))

    def _vals_done_by_marker(self, path: str, step: int) -> int:
        """A checkpoint written before state files: when the run ended with it (model_dir/DONE
        names it), every phase at its step ran."""
        done = read_done(self.model_dir)
        if done and done.get("step") == step and done.get("checkpoint") == Path(path).name and self._is_listed(path):
            return ALL_PHASES
        return 0

    def _load_callback_states(self, states: dict[str, Any]) -> None:
        for key, callback in self._keyed_callbacks():
            if key in states and (self.placement.is_chief or not callback.chief_only):
                callback.after_load_checkpoint(self, states[key])

    def _keyed_callbacks(self) -> list[tuple[str, Callback]]:
        """Each callback under a name that a later run of the pipeline gives it too: its type, numbered when repeated."""
        seen: Counter = Counter()
        keyed = []
        for callback in self.callbacks:
            keyed.append((f"{callback.name}.{seen[callback.name]}" if seen[callback.name] else callback.name, callback))
            seen[callback.name] += 1
        return keyed

    def _resume_state(self) -> dict[str, Any]:
        """What the state file beside a checkpoint holds (see dsl/engine/resume_state.py)."""
        states = {}
        for key, callback in self._keyed_callbacks():
            state: dict[str, Any] = {}
            callback.before_save_checkpoint(self, state)
            if state:
                states[key] = state
        return {"step": self.step, "epoch": self.epoch, "val_phases_done": self._vals_done, "callbacks": states}

    def _is_listed(self, path: str) -> bool:
        """Whether `path` is one of this run directory's checkpoints."""
        listed = {Path(p).resolve() for p in self.checkpoint_manager.checkpoints}
        return Path(path).resolve() in listed

    def weights_checkpoint(self) -> tf.train.Checkpoint:
        """A reader of the model and the position in a training checkpoint, without the optimizer."""
        return tf.train.Checkpoint(model=self.model, **self._state)

    def _restore_from(self, path: str, reader: tf.train.Checkpoint, partial: bool = False,
                      option: str = "--resume-from") -> str | None:
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
                raise self._does_not_fit(path, exc, option) from None
            return f"{type(exc).__name__}: {_first_line(exc)}"
        except (tf.errors.OpError, IndexError, KeyError, OSError) as exc:
            # What TensorFlow's reader raises for missing, truncated and garbled files.
            return f"{type(exc).__name__}: {_first_line(exc)}"
        if partial:
            status.expect_partial()
        try:
            status.assert_existing_objects_matched()
        except AssertionError as exc:
            raise self._does_not_fit(path, exc, option) from None
        return None

    @staticmethod
    def _does_not_fit(path: str, exc: Exception, option: str) -> DslError:
        if option == "--resume-from":
            hint = "use --no-resume or another runner.model_dir"
        else:
            hint = f"pass {option} with a checkpoint of this pipeline's network"
        return DslError(
            f"checkpoint {path} does not fit this pipeline (the network or optimizer changed?): "
            f"{_first_line(exc)}; {hint}"
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
        vals_seen: Counter = Counter()  # val phases met so far at each position
        for phase in plan_phases(self.workflow, self.max_epochs or self.max_iters, self.by_epoch):
            if self.should_stop:
                break
            ordinal = vals_seen[phase.start] if phase.mode == "val" else 0
            vals_seen[phase.start] += phase.mode == "val"
            self._run_phase(phase, ordinal)
        self._call("after_run")
        if not self._signal:
            self._check_replicas_agree()

    def _run_phase(self, phase: Phase, ordinal: int = 0) -> None:
        """Run `phase` unless it is done; `ordinal` counts the val phases before it at its position."""
        if phase.mode == "val":
            # Due when training stands at its start and it did not run there before a restart
            # (by epoch, a position inside an epoch means that epoch's val phases ran).
            mid_epoch = self.by_epoch and self.data_position > 0
            if phase.start == self._units_done() and ordinal >= self._vals_done and not mid_epoch:
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
        self.phase_steps, _ = self._eval_share("val", self.pipeline["runner"].get("val_steps"))
        started = time.perf_counter()
        self._call("before_val_epoch")
        tick = time.perf_counter()
        self.outputs = self.evaluate("val", self.pipeline["runner"].get("val_steps"))
        self.iter_seconds = time.perf_counter() - tick
        self.inner_step = self.phase_steps
        self._call("after_val_iter")
        self._finish_phase("val", dict(self.outputs), time.perf_counter() - started)
        self._vals_done += 1
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
        if not self.by_epoch:
            self._vals_done = 0  # a new position: its val phases are still to run
        if self.data_position >= self.steps_per_epoch:
            # The data epoch is complete: callbacks at after_train_epoch see it counted.
            self.epoch += 1
            self.data_position = 0
            self._iterator = None
            self._vals_done = 0

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

    def _checkpoint_to_restore(self, option: str) -> tuple[list[str], bool]:
        """The checkpoints to try, newest first, and whether the user named the one to use (with `option`)."""
        if self._resume_from:
            return [resolve_checkpoint(self._resume_from, option)], True
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
        for callback in self.callbacks:
            if callback.chief_only and not self.placement.is_chief:
                continue
            getattr(callback, point)(self)
            if point == "before_run":
                self._started_callbacks.add(id(callback))
        if point == "before_run":
            self._callbacks_started = True

    def _start_skipped_callbacks(self) -> None:
        """A rank that became the chief (Horovod elastic: rank 0's host was lost) runs
        `before_run` of the chief-only callbacks it skipped at the start, once each."""
        if not self._callbacks_started:
            return  # before_run itself has not come yet: it will start every callback
        for callback in self.callbacks:
            if callback.chief_only and id(callback) not in self._started_callbacks:
                callback.before_run(self)
                self._started_callbacks.add(id(callback))

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


def holds_training_state(path: str) -> bool:
    """Whether `path` is a training checkpoint (with the position), not one of the model alone (best/)."""
    try:
        names = {name for name, _ in tf.train.list_variables(path)}
    except (tf.errors.OpError, ValueError, OSError):
        return True  # unreadable: restoring it says why
    return "step/.ATTRIBUTES/VARIABLE_VALUE" in names


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
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)  # where in TensorFlow, not what
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

