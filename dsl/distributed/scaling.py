"""How a pipeline's batch and learning rate follow the number of replicas it trains on.

A pipeline must learn as well on N ranks as on one: that is the point of moving it. The
default (`runner.batch_scaling: none`) keeps the **global** batch `inputter.batch_size`
whatever the world size, as `tf.distribute` does: each of N replicas takes `batch_size / N`,
the steps per epoch stay those of one process, and the learning rate needs no change. The
run is then the one-process run with its batch computed in N pieces (batch normalisation
aside, which sees the per-replica batch; `sync_batch_norm` when that batch is small).

`runner.batch_scaling: linear` keeps `batch_size` per replica instead, so the global batch
grows N-fold (faster epochs, 1/N of the steps). The learning rate then follows the growth
`k` of the global batch (`runner.lr_scaling`): `linear` (x k, Goyal et al., for SGD with
momentum, with a gradual warmup), `sqrt` (x sqrt(k), for adaptive optimizers such as Adam),
`none`; `auto` picks linear or sqrt by the optimizer. Measured on the quickstart
(docs/benchmarks.md, "Moving a pipeline to N ranks").

`replicas` is the number of replicas whose batches one optimizer step combines: the ranks
of an allreduce; 1 for an asynchronous parameter-server cluster, where each update is one
worker's batch and the batch is not scaled. There the N workers' updates are stale instead:
each gradient was computed on weights about N - 1 updates old, and the rate is divided by N
(`runner.async_lr_scaling: staleness`, the mean staleness; Zhang et al. 2016, staleness-aware
async SGD). Asynchrony also acts as momentum: N workers add an implicit momentum of about
1 - 1/N to the updates (Mitliagkas et al. 2016, "Asynchrony begets momentum"), so the
optimizer's own momentum is lowered by that much (`runner.async_momentum: staleness`), and
the two together are what one process uses. Pure Python: `dslrun validate` uses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsl.language import backend_registry
from dsl.language.errors import DslError
from dsl.language.resolved import Pipeline, Runner

# Optimizers whose step is normalised by gradient statistics: their rate grows with sqrt(k).
ADAPTIVE_OPTIMIZERS = frozenset({"adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "lamb"})


@dataclass(frozen=True)
class Scaling:
    """The batch and learning-rate factor of one replica at one world size."""

    replicas: int  # replicas whose batches one optimizer step combines
    declared_batch_size: int  # inputter.batch_size as written
    batch_size: int  # this replica's batch
    batch_scaling: str  # "none" (batch_size is global) or "linear" (per replica)
    lr_scaling: str  # the rule in force: "none", "linear", "sqrt" (auto resolved) or "staleness"
    lr_factor: float  # multiplies modeler.optimizer.learning_rate
    asynchronous_workers: int = 1  # workers updating the variables without waiting for each other
    momentum: float | None = None  # modeler.optimizer.momentum in force, when runner.async_momentum lowered it
    written_momentum: float | None = None  # modeler.optimizer.momentum as written, then

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.replicas

    @property
    def growth(self) -> float:
        """How much larger the global batch is than `inputter.batch_size` (k)."""
        return self.global_batch_size / self.declared_batch_size

    def uneven(self) -> bool:
        """The global batch does not divide across the replicas: each takes the floor."""
        return self.batch_scaling == "none" and self.global_batch_size != self.declared_batch_size

    def describe(self, base_learning_rate: float | None = None) -> str:
        """`global batch 64 = 2 x 32, learning rate 0.1 (x1, batch_scaling none)`."""
        if self.asynchronous_workers > 1:
            return self._describe_asynchronous(base_learning_rate)
        parts = [f"global batch {self.global_batch_size} = {self.replicas} x {self.batch_size}"]
        if self.uneven():
            parts[0] += f" (inputter.batch_size {self.declared_batch_size} does not divide by {self.replicas})"
        rule = f"lr_scaling {self.lr_scaling}" if self.lr_scaling != "none" else f"batch_scaling {self.batch_scaling}"
        factor = f"x{self.lr_factor:g}, {rule}"
        if base_learning_rate is not None:
            parts.append(f"learning rate {base_learning_rate * self.lr_factor:g} ({factor})")
        else:
            parts.append(f"learning rate {factor}")
        return ", ".join(parts)


    def _describe_asynchronous(self, base_learning_rate: float | None) -> str:
        """`batch 128 per update from 4 asynchronous workers, learning rate 0.025 (x0.25, async_lr_scaling staleness)`."""
        rule = "async_lr_scaling staleness" if self.lr_scaling == "staleness" else "async_lr_scaling none"
        rate = f"{base_learning_rate * self.lr_factor:g} " if base_learning_rate is not None else ""
        text = (f"batch {self.batch_size} per update from {self.asynchronous_workers} asynchronous workers, "
                f"learning rate {rate}(x{self.lr_factor:g}, {rule})")
        if self.momentum is not None and self.written_momentum is not None:
            implicit = 1.0 - 1.0 / self.asynchronous_workers
            text += (f", momentum {self.momentum:.4g} ({self.written_momentum:g} - {implicit:.4g}"
                     f"{', at least 0' if self.momentum == 0.0 else ''}, async_momentum staleness)")
        return text


class ScalingError(DslError):
    """The batch cannot be shared by this many replicas."""


def lr_rule(runner: Runner, optimizer: Mapping[str, Any]) -> str:
    """`runner.lr_scaling` with `auto` resolved by the optimizer's type."""
    if runner.lr_scaling != "auto":
        return runner.lr_scaling
    kind = str(optimizer.get("type", "momentum"))
    return "sqrt" if kind in ADAPTIVE_OPTIMIZERS else "linear"


def scaling_for(pipeline: Pipeline, replicas: int, asynchronous_workers: int = 1) -> Scaling:
    """The batch each replica takes and the learning-rate factor, for `replicas` in one step, or
    (`asynchronous_workers` > 1) for that many workers updating without waiting for each other."""
    runner = pipeline.runner
    declared = int(pipeline.inputter.params["batch_size"])
    replicas = max(1, int(replicas))
    batch_scaling = runner.batch_scaling
    if batch_scaling == "none":
        batch = declared // replicas
        if batch < 1:
            raise ScalingError(
                f"inputter.batch_size {declared} is the global batch (runner.batch_scaling: none), and "
                f"{replicas} replicas cannot share it: at least one example each; raise inputter.batch_size "
                f"to {replicas} or more, or set runner.batch_scaling: linear (batch_size per replica)"
            )
    else:
        batch = declared
    if asynchronous_workers > 1:
        workers = int(asynchronous_workers)
        written, momentum = _asynchronous_momentum(pipeline, workers)
        staleness = runner.async_lr_scaling == "staleness"
        return Scaling(replicas, declared, batch, batch_scaling, "staleness" if staleness else "none",
                       1.0 / workers if staleness else 1.0, workers, momentum, written)
    growth = batch * replicas / declared
    rule = lr_rule(runner, pipeline.modeler.params["optimizer"])
    if growth <= 1.0 + 1e-9:
        # The global batch does not grow (or shrinks by a rounding remainder): the rate stays.
        return Scaling(replicas, declared, batch, batch_scaling, "none", 1.0)
    factor = {"linear": growth, "sqrt": math.sqrt(growth)}.get(rule, 1.0)
    return Scaling(replicas, declared, batch, batch_scaling, rule, factor)


def asynchronous_momentum(written: float, workers: int) -> float:
    """The optimizer's momentum for `workers` asynchronous workers: `written` less the momentum
    their asynchrony adds, 1 - 1/N (Mitliagkas et al. 2016), and at least 0 (their paper finds
    negative momentum can help further under much asynchrony; dslrun stops at none)."""
    return max(0.0, written - (1.0 - 1.0 / workers))


def _asynchronous_momentum(pipeline: Pipeline, workers: int) -> tuple[float | None, float | None]:
    """(written, in force) momentum when `runner.async_momentum: staleness` lowers it, else (None, None)."""
    optimizer = pipeline.modeler.params["optimizer"]
    # The resolved pipeline carries every optimizer's defaults, so an optimizer with a heavy ball
    # has its `momentum` here, written or filled.
    if pipeline.runner.async_momentum != "staleness" or optimizer.get("momentum") is None:
        return None, None
    written = float(optimizer["momentum"])
    if written == 0.0:
        return None, None
    return written, asynchronous_momentum(written, workers)


def replicas_for(runner: Runner, world_size: int) -> int:
    """The replicas one step combines when `world_size` processes train the pipeline (for
    `dslrun validate --data --world-size`, before any backend exists): all of them, except
    in an asynchronous parameter-server cluster, where each update is one worker's batch (the
    backend's `asynchronous` capability, see dsl.language.backend_registry)."""
    return 1 if _asynchronous(runner) else world_size


def asynchronous_workers_for(runner: Runner, world_size: int) -> int:
    """The workers updating without waiting for each other when `world_size` processes train the
    pipeline (validate's counterpart of the backend's `asynchronous_workers()`): all of them in an
    asynchronous parameter-server cluster, none otherwise (1)."""
    return world_size if _asynchronous(runner) else 1


def _asynchronous(runner: Runner) -> bool:
    return any(spec.can("asynchronous", runner.params) for spec in backend_registry.candidates(runner.params))


def warmup_steps(pipeline: Pipeline, steps_per_epoch: int | None) -> int:
    """The schedule's warmup in steps, as dsl.modelers._schedules converts it (at least one step)."""
    epochs = float((pipeline.modeler.params.get("lr_schedule") or {}).get("warmup_epochs") or 0)
    if not epochs or not steps_per_epoch:
        return 0
    return max(1, round(epochs * steps_per_epoch))


def steps_per_epoch(num_examples: int | None, batch_size: int, world_size: int, drop_remainder: bool) -> int | None:
    """Train steps per epoch on every rank: the same count everywhere, so no rank waits forever."""
    if num_examples is None:
        return None
    per_rank = num_examples // world_size
    steps = per_rank // batch_size if drop_remainder else math.ceil(per_rank / batch_size)
    return max(steps, 0)
