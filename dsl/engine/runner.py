"""The one training loop every backend shares, and the state callbacks see.

The runner walks the workflow (mmcv's `[[train, 2], [val, 1]]`), calls the compiled step functions,
and calls every callback at each hook point. It never branches on the backend: the backend only
shards data, wraps the gradient tape, broadcasts and reduces.

State that must survive a restart — model, optimizer, step, data epoch and the position inside it —
lives in one `tf.train.Checkpoint` (checkpointing.py, resume.py); the data order of each epoch is
derived from (seed, epoch), so the position is two integers instead of a saved shuffle buffer. A
change of the number of ranks is resize.py's; metrics across ranks are metric_reduction.py's.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.distributed.scaling import Scaling
from dsl.distributed.sync_batch_norm import BatchNormSync
from dsl.engine import resize, resume, stop_agreement
from dsl.engine.callback_list import CallbackList
from dsl.engine.checkpointing import Checkpoints, random_generators
from dsl.engine.compiler import CompiledPipeline, use_jit
from dsl.engine.contracts import Backend, StepCall
from dsl.engine.data_feed import DataFeed, explain_failure
from dsl.engine.divergence import DivergenceGuard
from dsl.engine.hooks import Callback
from dsl.engine.metric_reduction import reduced_results
from dsl.engine.phase_report import PhaseReport
from dsl.engine.phases import Phase, due_phases, plan_phases
from dsl.engine.precision import loss_scale_variables, with_loss_scaling
from dsl.engine.replicas import ReplicaState, replicas_agree
from dsl.engine.run_state import Read, RunState, World
from dsl.engine.rundir import MetricsFile, ReplayedPhases, clear_done, mark_done
from dsl.engine.steps import phase_metrics
from dsl.engine.summaries import SummaryWriters
from dsl.language.errors import DslError


class Runner:
    """Drives one process's share of the training; what callbacks may use is `contracts.RunnerView`."""

    # Position, world and origin live in `run_state` (run_state.py), which only the runner writes.
    step, epoch, data_position, vals_done = Read[int]("step"), Read[int]("epoch"), Read[int]("data_position"), \
        Read[int]("vals_done")
    scaling, steps_per_epoch = Read[Scaling]("world", "scaling"), Read[int]("world", "steps_per_epoch")
    batch_norm_sync = Read["BatchNormSync | None"]("world", "batch_norm")
    batch_size, global_batch_size = Read[int]("world", "batch_size"), Read[int]("world", "global_batch_size")
    resumed, restored_from = Read[bool]("resumed"), Read["str | None"]("restored_from")
    restored_step, restored_epoch = Read["int | None"]("restored_step"), Read["int | None"]("restored_epoch")

    def __init__(self, compiled: CompiledPipeline, backend: Backend, *, seed: int, scaling: Scaling,
                 batch_norm: BatchNormSync | None = None, resume: bool = True, resume_from: str | None = None) -> None:
        pipeline = compiled.pipeline
        params = pipeline.runner
        self.pipeline = pipeline
        self.context = compiled.context
        self.backend = backend
        self.placement = backend.placement
        self.model_dir = Path(params.model_dir)
        self.model, self.modeler = compiled.model, compiled.modeler
        self.inputter, self.augmenter = compiled.inputter, compiled.augmenter
        self.callback_list = CallbackList([DivergenceGuard(dict(params.divergence)), *compiled.callbacks])
        self.seed, self.resume, self.resume_from = seed, resume, resume_from

        self.workflow: list[tuple[str, int]] = list(params.workflow)
        self.max_epochs: int | None = params.max_epochs
        self.max_iters: int | None = params.max_iters
        self.by_epoch = self.max_epochs is not None
        self.steps_per_call: int = params.steps_per_call
        self.val_steps: int | None = params.val_steps
        self.run_state = RunState(World(self.placement.world_size, scaling, self.context.steps_per_epoch or 0, batch_norm))
        self.data = DataFeed(compiled.inputter, compiled.augmenter, backend, self.batch_size, seed)
        self.data.check(self.steps_per_epoch, self.placement.world_size)

        self.jit_compile = use_jit(params.jit_compile)
        self.traces: Counter[str] = Counter()
        with backend.scope():
            lowered = {} if self.scaling.momentum is None else {"momentum": self.scaling.momentum}  # async_momentum
            self.optimizer = with_loss_scaling(self.modeler.optimizer(self.steps_per_epoch, self.scaling.lr_factor, **lowered))
            self.optimizer.build(self.model.trainable_variables)
            self.metrics = {mode: phase_metrics(self.modeler, mode) for mode in ("train", "val")}
            self.state = {name: tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
                          for name in ("step", "epoch", "data_position")}
        # [resumed, val phases done at the restored step, a callback ended the run]: the chief's (resume.py)
        self.resume_flags = tf.Variable([0, 0, 0], dtype=tf.int64, trainable=False, name="resume_flags")
        self._train_call: StepCall
        self._val_call: StepCall
        self.replica_state = ReplicaState()  # batch-norm statistics, averaged where read (replicas.py)
        self.compile_calls()

        self._generators = random_generators(self.model)
        rng = {"rng": self._generators} if self._generators else {}
        self.checkpoints = Checkpoints({"model": self.model, "optimizer": self.optimizer, **self.state, **rng},
                                       self.model_dir, compiled.max_to_keep, self.placement, self.notice)
        self.metrics_format: str = params.metrics_format
        self.metrics_file = MetricsFile(self.model_dir, self.metrics_format) if self.placement.is_chief else None
        self.replayed, self.phase_recorded_before = ReplayedPhases(), False  # phases a resume runs again (rundir.py)
        self.summaries = SummaryWriters(self.model_dir, self.placement)
        self._graph_args: tuple[Any, ...] | None = None

        self.mode, self.inner_step, self.iter_seconds = "train", 0, 0.0
        self.phase_steps: int | None = None
        self.outputs: dict[str, float] = {}
        self.phase_outputs: dict[str, float] = {}
        self.report = PhaseReport(self.modeler)  # the modeler's report of the last val pass, e.g. per class
        self.history: list[dict[str, Any]] = []
        self.stop = stop_agreement.StopState()  # whether and why the run stops (request_stop, fail, signals, agreements)

    # -------------------------------------------------------- public API for callbacks
    def request_stop(self, reason: str) -> None:
        """End training after the current call (several ranks: the next agreed one, stop_agreement.py); `reason` is printed."""
        self.stop.ask(reason)

    def fail(self, reason: str) -> None:
        """End training now and exit non-zero (e.g. a NaN loss)."""
        self.stop.ask(reason, failed=True)

    # What callbacks read of the stop (a stop asked, a failure, the first reason): `stop` holds it.
    should_stop = property(lambda self: self.stop.asked)
    failed = property(lambda self: self.stop.failed)
    stop_reason = property(lambda self: self.stop.reason)

    def save_checkpoint(self) -> str | None:
        """Write all training state (chief only); returns the checkpoint path."""
        if not self.placement.is_chief:
            return None
        state = {"step": self.step, "epoch": self.epoch, "val_phases_done": self.vals_done,
                 "callbacks": self.callback_list.states(self)}
        return self.checkpoints.save({"step": self.step, "epoch": self.epoch, "data_position": self.data_position}, state)

    def summary_writer(self, mode: str) -> Any:
        """TensorBoard writer for `mode` (model_dir/tensorboard/<mode>); a no-op writer off the chief."""
        return self.summaries.get(mode)

    def train_graph_def(self) -> Any:
        """The compiled train call's GraphDef (after the first call), for TensorBoard's Graphs tab."""
        if self._graph_args is None:
            return None
        return self._train_call.get_concrete_function(*self._graph_args).graph.as_graph_def()  # type: ignore[attr-defined]

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

    # ---------------------------------------------------------- for backends (elastic)
    def add_callback(self, callback: Callback) -> None:
        """Add a callback of dslrun's own (a backend's), keeping the calling order by priority."""
        self.callback_list.add(callback)

    def state_variables(self) -> list[tf.Variable]:
        """Every variable a restart must restore: model, optimizer (slots, step count, loss scale), RNG."""
        return (list(self.model.variables) + list(self.optimizer.variables) + loss_scale_variables(self.optimizer)
                + [generator.state for generator in self._generators])

    def position(self) -> dict[str, int]:
        """Where training stands, in units that survive a change of the number of ranks."""
        return {"step": self.step, "epoch": self.epoch, "epoch_examples": self.data_position * self.global_batch_size}

    def enter_world(self, step: int, epoch: int, epoch_examples: int) -> None:
        """Continue from `position()` values with the ranks there are now (Horovod elastic): with
        another number the batches, steps per epoch and learning rate change (resize.py), the data
        is sharded anew, the schedule rebuilt and shifted, and the step functions traced again."""
        resized = self.placement.world_size != self.run_state.world.size
        if resized:  # the same policy at the new size (dsl/distributed/scaling.py)
            self.run_state.world = resize.world_for(self.pipeline, self.inputter, self.backend, self.run_state.world)
            resize.resync_batch_norm(self.backend, self.model, self.run_state.world)
            self.data.batch_size, self.context.steps_per_epoch = self.batch_size, self.steps_per_epoch
            self.data.check(self.steps_per_epoch, self.placement.world_size)
        self.run_state.move_to(step, epoch, resize.batches_done(epoch_examples, self.global_batch_size, self.steps_per_epoch))
        # From the broadcast position, so that a rank that joined (built for this world, never
        # shifted) and the survivors (rebuilt at every resize) follow one schedule.
        offset = resize.schedule_offset(self.by_epoch, epoch, self.data_position, self.steps_per_epoch,
                                        int(self.optimizer.iterations.numpy()))
        if resized or offset != self.run_state.schedule_offset:
            self.run_state.schedule_offset = offset
            self.optimizer.learning_rate = resize.shifted_schedule(self.modeler, self.run_state.world, offset)
            self.compile_calls()
        if self.placement.is_chief:  # a rank that became the chief (rank 0's host was lost) takes up its role
            self.metrics_file = self.metrics_file or MetricsFile(self.model_dir, self.metrics_format)
            self.callback_list.start_skipped(self)

    def compile_calls(self) -> None:
        """(Re)build the backend's compiled train and eval calls (traced at their first call)."""
        self._train_call = self.backend.make_train_call(self)
        self._val_call = self.backend.make_val_call(self)
        self.replica_state.use(self.backend.make_reconcile_call(self))
        self._graph_args = None

    # ------------------------------------------------------------------------- the loop
    def run(self, on_start: Callable[[], None] | None = None) -> int:
        """Train through the workflow; returns the process exit status.

        A run already at its end (the same command run again) writes nothing and exits 0.
        `on_start` is called once training will happen, after the callbacks' `before_run` (the run
        command stores pipeline.yaml then: a run refused at its start leaves no run directory).
        """
        other_work = self.backend.run_task(self)
        if other_work is not None:
            return other_work
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.restore()
            self.stop.finished = resume.finished(self)
            if self.stop.finished:
                self.notice(self.stop.finished)
                return 0
            if self.resumed:
                self.notice(f"resumed from {self.restored_from} at step {self.step} (epoch {self.epoch})")
            if self.placement.is_chief:
                clear_done(self.model_dir)
            self._call("before_run")
            if on_start is not None:
                on_start()
            self.backend.run_training(self, self._train_workflow)
            if self.placement.is_chief and not self.stop.signal and not self.stop.failed:
                mark_done(self.model_dir, self.step, self.checkpoints.latest)
        except tf.errors.OpError as exc:
            raise explain_failure(exc, self.inputter, self.mode, self.step) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.summaries.flush()
        if self.stop.signal:
            path = self.save_checkpoint()
            name = signal.Signals(self.stop.signal).name
            where = f"saved a checkpoint at step {self.step} in {path}" if path else "the chief saves the checkpoint"
            self.notice(f"interrupted by {name}: {where}; run the same command to resume")
            return 128 + self.stop.signal
        if self.stop.reason:
            self.notice(f"{'failed' if self.stop.failed else 'stopped'}: {self.stop.reason}")
        return 1 if self.stop.failed else 0

    def restore(self, weights_only: bool = False, option: str = "--resume-from") -> None:
        """Resume from `option` (`--resume-from`), else the run directory's newest usable checkpoint, else start fresh.

        A damaged newest checkpoint (truncated, garbled, a file missing) is reported and the
        one before it is used; when none is usable the run stops instead of silently
        starting over. A checkpoint the user named is used or refused, never replaced.
        `weights_only` (eval, predict, export, whose flag is `--checkpoint`) reads the model
        and the position and leaves the optimizer alone: its slots need not fit (a ps run
        saves them per shard); it also takes a checkpoint of the model alone (best/).
        """
        restored = resume.restore(self, weights_only, option)
        self.run_state.apply(restored)
        if self.resumed and not weights_only and self.metrics_file is not None:
            self.replayed = ReplayedPhases(self.metrics_file.read(), self.step)
        if restored.stopped and not self.should_stop:
            self.request_stop("a callback of the chief ended the run")

    def watch(self, mode: str = "val", timeout: float | None = None) -> int:
        """Evaluate each checkpoint the run writes, once, until it ends (dsl/engine/watch.py)."""
        from dsl.engine.watch import watch

        return watch(self, mode=mode, timeout=timeout)

    def evaluate(self, mode: str = "val", max_steps: int | None = None) -> dict[str, float]:
        """One pass over `mode`'s data with the current weights; each value over every rank's data."""
        for metric in self.metrics["val"].values():
            metric.reset_state()
        steps, _ = self.data.eval_share(mode, max_steps)
        if steps == 0:
            raise DslError(f"the {mode} data of this rank is empty; check inputter.{mode}")
        self._val_call(self.data.eval_iterator(mode), tf.constant(steps, tf.int32))
        return reduced_results(self.metrics["val"], self.backend, lambda: self.report.take(self.metrics["val"]))

    def take_restored_position(self) -> None:
        """The step and epoch of the checkpoint a weights reader just restored (eval --watch)."""
        self.run_state.move_to(int(self.state["step"].numpy()), int(self.state["epoch"].numpy()), 0)

    def units_done(self) -> int:
        """Train units (epochs, or steps when iteration-based) completed."""
        return self.epoch if self.by_epoch else self.step

    # ------------------------------------------------------------------------ internals
    def _train_workflow(self) -> None:
        """The workflow from the current position to the end; run again after an elastic reset."""
        plan = plan_phases(self.workflow, self.max_epochs or self.max_iters or 0, self.by_epoch)
        for phase in due_phases(plan, lambda: (self.units_done(), self.vals_done, self.by_epoch and self.data_position > 0)):
            self._agree_on_stopping()
            if self.stop.stopping:
                break
            self._run_phase(phase)
        else:
            self._agree_on_stopping()  # a stop asked during the last phase: every rank learns it before after_run
        self._call("after_run")
        if self.stop.agreed < stop_agreement.INTERRUPTED and self.placement.world_size > 1:  # one model, or say not
            agreed, message = replicas_agree(self.backend, self.model)
            (self.notice if agreed else self.fail)(message)

    def _run_phase(self, phase: Phase) -> None:
        """Run a phase that has work (phases.due_phases)."""
        if phase.mode == "val":
            self._val_phase()
        elif self.by_epoch:
            self._train_phase(self.steps_per_epoch - self.data_position)
        else:
            self._train_phase(phase.start + phase.count - self.step)

    def _agree_on_stopping(self) -> None:
        """Every rank stops at the same point: one rank's reason stops them all (stop_agreement.py: where).
        Only the agreed value (`stop.agreed`) decides what a rank does next: what was asked
        (`stop.asked`, `stop.signal`) can change on one rank alone at any time (a signal, a callback)."""
        mine = self.stop.mine()
        agreed = self.backend.max_across_ranks(mine) if self.placement.world_size > 1 else mine
        self.stop.learn(agreed, signal.SIGTERM)

    def _train_phase(self, num_steps: int) -> None:
        self.mode, self.inner_step, self.phase_steps = "train", 0, num_steps
        for metric in self.metrics["train"].values():
            metric.reset_state()
        started = time.perf_counter()
        self._call("before_train_epoch")
        if self.placement.world_size <= 1:  # one process: a stop asked in before_train_epoch, as asked
            self.stop.learn(self.stop.mine(), signal.SIGTERM)  # (several ranks: as agreed just before the phase)
        while self.inner_step < num_steps and not self.stop.stopping:
            iterator, count, before = *self._next_chunk(min(self.steps_per_call, num_steps - self.inner_step)), self.step
            self._call("before_train_iter")
            tick = time.perf_counter()
            outputs = self._train_call(iterator, tf.constant(count, tf.int32))
            self.outputs = {name: float(value) for name, value in outputs.items()}
            self.iter_seconds = time.perf_counter() - tick
            if self._graph_args is None:
                self._graph_args = (iterator, tf.constant(count, tf.int32))
            self._advance(count)
            agree = stop_agreement.due(before, self.step, self.inner_step >= num_steps, self.placement.world_size)
            self.replica_state.after_call(agree or self.callback_list.read_replica_state(before, self.step))
            self._call("after_train_iter")
            if agree:
                self._agree_on_stopping()
        values = {**reduced_results(self.metrics["train"], self.backend), "learning_rate": self.outputs.get("learning_rate", 0.0)}
        self._finish_phase("train", values, time.perf_counter() - started, partial=self.inner_step < num_steps)
        self._call("after_train_epoch")

    def _val_phase(self) -> None:
        """One val pass: a single compiled call, so one iter (before_val_iter .. after_val_iter)."""
        self.mode, self.inner_step = "val", 0
        self.phase_steps, _ = self.data.eval_share("val", self.val_steps)
        started = time.perf_counter()
        self._call("before_val_epoch")
        self._call("before_val_iter")
        tick = time.perf_counter()
        self.outputs = self.evaluate("val", self.val_steps)
        self.iter_seconds, self.inner_step = time.perf_counter() - tick, self.phase_steps
        self._call("after_val_iter")
        self._finish_phase("val", dict(self.outputs), time.perf_counter() - started)
        self.run_state.vals_done += 1
        self._call("after_val_epoch")
        self.mode = "train"

    def _finish_phase(self, mode: str, values: dict[str, float], seconds: float, partial: bool = False) -> None:
        self.phase_outputs = dict(values)
        skipped = self.inputter.skipped_examples(mode)  # by inputter.skip_corrupt, when it counts them up front
        if skipped is not None:
            self.phase_outputs["skipped_examples"] = skipped
        self.history.append(record := {"mode": mode, **self.run_state.phase_epoch(partial), "step": self.step, **self.phase_outputs})
        self.phase_recorded_before = self.replayed.holds(mode, self.step, self.phase_outputs)
        report = self.report.finish(self, mode)
        if not self.phase_recorded_before:
            self.log_metrics(mode, {**record, **report, "seconds": round(seconds, 3)})

    def _next_chunk(self, wanted: int) -> tuple[Any, int]:
        """The iterator positioned at the next batch, and how many steps it can still give."""
        if self.run_state.iterator is None:
            self.run_state.iterator = self.data.train_iterator(self.epoch, self.data_position, self.steps_per_epoch)
        return self.run_state.iterator, min(wanted, self.steps_per_epoch - self.data_position)

    def _advance(self, count: int) -> None:
        # A complete data epoch is counted before after_train_epoch; the iterator goes on into the next.
        self.inner_step += count
        self.run_state.advance(count, self.by_epoch)

    def _call(self, point: str) -> None:
        self.callback_list.call(point, self)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Stop after the current call and save; a second signal ends the process at once."""
        self.stop.signal = signum
        self.request_stop(f"interrupted by {signal.Signals(signum).name}")
        signal.signal(signum, signal.SIG_DFL)

