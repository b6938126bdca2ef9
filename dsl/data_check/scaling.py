"""`dslrun validate --data --world-size N`: what N ranks make of the batch, the rate and the warmup.

The same numbers the run's header prints (dsl/distributed/scaling.py), whether batch norm is synchronised
and why (dsl/distributed/sync_batch_norm.py), known before any process starts, and the warnings a scaled
run deserves: a rate scaled up with less warmup than one process takes at the unscaled rate
(the quickstart at 2 ranks diverged so, docs/benchmarks.md), a global batch that does not
divide across the ranks, batch statistics of a few examples left unsynchronised. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsl.distributed.scaling import Scaling, ScalingError, asynchronous_workers_for, replicas_for, scaling_for, warmup_steps
from dsl.distributed.sync_batch_norm import SMALL_BATCH, BatchNormSync, decide, normalises, switch_for
from dsl.language import backend_registry
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath
from dsl.language.resolved import Pipeline


@dataclass
class ScalingReport:
    """The scaling at `world_size` processes, and the run's length in steps."""

    world_size: int
    scaling: Scaling
    base_learning_rate: float
    steps_per_epoch: int
    warmup_steps: int
    run_steps: int | None
    batch_norm: BatchNormSync

    def summary(self) -> str:
        text = f"runner at {self.world_size} process{'es' * (self.world_size != 1)}: "
        text += self.scaling.describe(self.base_learning_rate)
        text += f", warmup {self.warmup_steps} steps" if self.warmup_steps else ", no warmup"
        text += f", {self.steps_per_epoch} steps per epoch"
        if self.run_steps:
            text += f", {self.run_steps} steps in the run"
        synced = self.batch_norm.describe()
        return f"{text}, {synced}" if synced else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "scaling": {
                "world_size": self.world_size, "replicas": self.scaling.replicas,
                "batch_size": self.scaling.batch_size, "global_batch_size": self.scaling.global_batch_size,
                "learning_rate": self.base_learning_rate * self.scaling.lr_factor, "lr_factor": self.scaling.lr_factor,
                "lr_scaling": self.scaling.lr_scaling, "batch_scaling": self.scaling.batch_scaling,
                "asynchronous_workers": self.scaling.asynchronous_workers, "momentum": self.scaling.momentum,
                "warmup_steps": self.warmup_steps, "steps_per_epoch": self.steps_per_epoch, "run_steps": self.run_steps,
                "sync_batch_norm": self.batch_norm.on,
            }
        }


def scaling_at(resolved: dict[str, Any], world_size: int, sources: SourceMap) -> tuple[Scaling | None, list[Diagnostic]]:
    """The scaling `world_size` processes get, or a located error when the batch cannot be shared."""
    pipeline = Pipeline.from_resolved(resolved)
    try:
        return scaling_for(pipeline, replicas_for(pipeline.runner, world_size),
                           asynchronous_workers_for(pipeline.runner, world_size)), []
    except ScalingError as exc:
        path: JsonPath = ("inputter", "batch_size")
        return None, [sources.diagnostic(path, str(exc))]


def scaling_report(resolved: dict[str, Any], sources: SourceMap, world_size: int, scaling: Scaling,
                   steps_per_epoch: int, one_process_steps: int) -> tuple[ScalingReport, list[Diagnostic]]:
    """The report, and warnings where the policy leaves the run too little warmup for its rate."""
    pipeline = Pipeline.from_resolved(resolved)
    runner = pipeline.runner
    base = float(pipeline.modeler.params["optimizer"]["learning_rate"])
    warmup = warmup_steps(pipeline, steps_per_epoch)
    run_steps = runner.max_iters or (runner.max_epochs or 0) * steps_per_epoch or None
    switch = switch_for(runner.params)
    synced = decide(runner.params, switch, scaling.batch_size, scaling.replicas, normalises(pipeline.network.params))
    report = ScalingReport(world_size, scaling, base, steps_per_epoch, warmup, run_steps, synced)
    found: list[Diagnostic] = []
    if scaling.uneven():
        path: JsonPath = ("inputter", "batch_size")
        found.append(sources.diagnostic(path, (
            f"the global batch {scaling.declared_batch_size} does not divide across {scaling.replicas} processes: "
            f"each takes {scaling.batch_size}, {scaling.global_batch_size} in all; a multiple of {scaling.replicas} "
            "keeps the batch of one process"), "warning"))
    if scaling.replicas > 1 and scaling.batch_size < SMALL_BATCH and synced.normalises and not synced.on:
        found.append(_unsynchronised(sources, synced, world_size, scaling))
    single = warmup_steps(pipeline, one_process_steps)
    if scaling.lr_factor > 1.0 and warmup < max(single, 1):
        path = ("runner", "batch_scaling")
        had = f"{single} steps on one process at {base:g}" if single else "no warmup on one process either"
        found.append(Diagnostic.at(sources.locate(path, key=True), path, (
            f"at {world_size} processes the learning rate is {base * scaling.lr_factor:g} ({scaling.lr_factor:g}x, "
            f"runner.lr_scaling {scaling.lr_scaling}) with {f'a warmup of {warmup} steps' if warmup else 'no warmup'} "
            f"({had}), and {steps_per_epoch} steps per epoch: a scaled rate needs a gradual warmup (Goyal et al.); "
            "lengthen modeler.lr_schedule.warmup_epochs, or set runner.batch_scaling: none to train with the "
            "global batch and rate of one process"), "warning"))
    return report, found


def _unsynchronised(sources: SourceMap, synced: BatchNormSync, world_size: int, scaling: Scaling) -> Diagnostic:
    """Batch statistics of fewer than SMALL_BATCH examples that stay per replica: the switch forced
    off, or a backend that cannot synchronise them."""
    few = (f"at {world_size} processes each normalises batch statistics over {scaling.batch_size} examples of the "
           f"global {scaling.declared_batch_size}: few enough to cost accuracy with batch normalisation (cnn_iters, "
           "global 32 on 4 ranks: 0.60 against 0.82 on one process)")
    if synced.switch is None:
        capable = [spec.name for spec in backend_registry.with_capability("sync_batch_norm")]
        path: JsonPath = ("inputter", "batch_size")
        fix = (f"; this backend cannot synchronise them: raise inputter.batch_size to {SMALL_BATCH * scaling.replicas}, "
               f"or train on runner.backend: {' or '.join(capable) or 'a backend that can'}")
        return sources.diagnostic(path, few + fix, "warning")
    key, _, leaf = synced.switch.partition(".")
    path = ("runner", key, leaf)
    return sources.diagnostic(path, (
        f"{few}; runner.{synced.switch}: false keeps them per replica: remove it (auto synchronises below "
        f"{SMALL_BATCH} per replica), or raise inputter.batch_size"), "warning")
