"""Stopping a run whose loss explodes, with the likely cause named (`runner.divergence`).

A learning rate too high for the batch — most often one scaled up for more ranks, or a
warmup too short for it — does not crash: the loss explodes, the weights end up anywhere
and the run finishes at chance with exit 0. The guard watches the train loss of the whole
run (or its first `epochs` epochs): NaN or infinite, or more than `factor` times the first
call's loss for `patience` train calls in a row, is a divergence. The bar is never below
`factor` itself: a run that starts with a small loss (fine-tuning a trained model) would
otherwise be stopped by the noise of a few batches; and one call above it is not enough: a
batch-norm network at a high rate without warmup can spike 8x in its first steps and
recover (the shipped cnn_iters at batch 16). It then fails the run before any callback
checkpoints that state (priority HIGHEST, ahead of the pipeline's own callbacks) or, with
`action: warn`, says so once. The message gives the rate in force, how it was scaled and
the warmup, and the settings to change. Its reference (the first loss) is saved with the
checkpoint, so a resumed run compares against the same number.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from dsl.distributed.scaling import Scaling, warmup_steps
from dsl.engine.contracts import RunnerView
from dsl.engine.hooks import Callback


class DivergenceGuard(Callback):
    """The `runner.divergence` check; the runner adds it ahead of the pipeline's callbacks."""

    priority = "HIGHEST"

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__({"type": "runner.divergence"})
        self.action = str(settings.get("action", "stop"))
        self.factor = float(settings.get("factor", 10.0))
        self.patience = int(settings.get("patience", 3))
        self.above = 0  # train calls in a row above the bar
        epochs = settings.get("epochs")
        self.epochs = float(epochs) if epochs is not None else None
        self.reference: float | None = None  # the first train call's loss
        self.warned = False
        self._call_start = 0  # the step at which the last train call started

    def after_train_iter(self, runner: RunnerView) -> None:
        if self.action == "off" or self.warned or not self._watching(runner):
            return
        loss = runner.outputs.get("loss")
        if loss is None:
            return
        if self.reference is None and math.isfinite(loss):
            self.reference = loss
            return
        if math.isfinite(loss):
            self.above = self.above + 1 if loss > self.factor * max(self.reference or 0.0, 1.0) else 0
            if self.above < self.patience:
                return
        message = f"{self._what(loss, runner.step)}; {diagnosis(runner)}"
        if self.action == "warn":
            self.warned = True
            runner.notice(f"warning: {message} (runner.divergence.action: warn, the run goes on)")
        else:
            reason = f"{message} (runner.divergence.action: warn or off to go on regardless)"
            if not runner.placement.is_chief:
                # The chief prints why the run failed; when another rank diverged first it
                # knows only that one did, so that rank says why itself.
                print(f"dslrun: rank {runner.placement.rank}: failed: {reason}", file=sys.stderr, flush=True)
            runner.fail(reason)

    def before_train_iter(self, runner: RunnerView) -> None:
        self._call_start = runner.step

    def _watching(self, runner: RunnerView) -> bool:
        """Whether the call that just ran started inside the first `epochs` epochs of the run."""
        if self.epochs is None or not runner.steps_per_epoch:
            return True
        return self._call_start < self.epochs * runner.steps_per_epoch

    def _what(self, loss: float, step: int) -> str:
        if not math.isfinite(loss):
            return f"the train loss diverged: it is {loss} at step {step}"
        assert self.reference is not None
        return (f"the train loss diverged: {loss:.4g} at step {step} is {loss / max(self.reference, 1e-12):.0f}x its "
                f"first value {self.reference:.4g} (runner.divergence.factor {self.factor:g})")

    def before_save_checkpoint(self, runner: RunnerView, state: dict[str, Any]) -> None:
        if self.reference is not None:
            state["reference_loss"] = self.reference

    def after_load_checkpoint(self, runner: RunnerView, state: dict[str, Any]) -> None:
        self.reference = state.get("reference_loss", self.reference)


def diagnosis(runner: RunnerView) -> str:
    """The rate in force, how it came about and what to change: one clause for the stop message."""
    scaling = runner.scaling
    base = float(runner.modeler.params["optimizer"]["learning_rate"])
    warmup = warmup_steps(runner.pipeline, runner.steps_per_epoch)
    warmup_text = f"a warmup of {warmup} steps" if warmup else "no warmup"
    if scaling.lr_factor > 1.0:
        return (
            f"the learning rate is {base * scaling.lr_factor:g} = {base:g} x {scaling.lr_factor:g} (the global batch "
            f"{scaling.global_batch_size} is {scaling.growth:g}x inputter.batch_size, runner.batch_scaling: linear, "
            f"runner.lr_scaling: {scaling.lr_scaling}) with {warmup_text}: set runner.batch_scaling: none to train "
            "with the global batch and rate of one process, or runner.lr_scaling: sqrt / none, or lengthen "
            "modeler.lr_schedule.warmup_epochs"
        )
    if scaling.asynchronous_workers > 1:
        return _asynchronous_diagnosis(base, scaling, warmup_text)
    return (
        f"the learning rate is {base:g} (modeler.optimizer.learning_rate) with {warmup_text}: lower "
        "modeler.optimizer.learning_rate, lengthen modeler.lr_schedule.warmup_epochs, or check the data"
    )


def _asynchronous_diagnosis(base: float, scaling: Scaling, warmup_text: str) -> str:
    """The rate of N asynchronous workers: divided by N (runner.async_lr_scaling: staleness) or not."""
    workers = scaling.asynchronous_workers
    if scaling.lr_scaling == "staleness":
        return (f"the learning rate is {base * scaling.lr_factor:g} = {base:g} / {workers} ({workers} asynchronous "
                f"workers, runner.async_lr_scaling: staleness) with {warmup_text}: lower "
                "modeler.optimizer.learning_rate, lengthen modeler.lr_schedule.warmup_epochs, or bound the steps "
                "with modeler.optimizer.clipnorm")
    return (f"the learning rate is {base:g} for each of {workers} asynchronous workers (runner.async_lr_scaling: none) "
            f"with {warmup_text}: set runner.async_lr_scaling: staleness to divide it by the workers, or lower "
            "modeler.optimizer.learning_rate")
