"""Whether batch normalisation takes its statistics over the global batch: `sync_batch_norm: auto`.

A replica normalises over its own batch. With the global batch divided across N replicas
(dsl/distributed/scaling.py) that is 1/N of what one process normalises over, and below about 16
examples the statistics are noisy enough to cost accuracy: cnn_iters (global batch 32) on
4 ranks, 8 per replica, ended at 0.60 against 0.79-0.82 on one process, and at 0.78-0.79
with the batch statistics synchronised (docs/benchmarks.md, "Moving a pipeline to N
ranks"). A backend that can synchronise them declares the `runner` path of its switch
(`Capabilities.sync_batch_norm`, e.g. `horovod.sync_batch_norm`); the switch is `auto`
by default, which turns synchronisation on when the network has batch normalisation and
each replica's batch is below `SMALL_BATCH`, off otherwise. `true` and `false` force it.

The decision is made again at every world size, so an elastic run that shrinks below the
threshold synchronises from then on (backends.horovod). Pure Python: `dslrun validate`
uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsl.language import backend_registry

# A per-replica batch below this normalises over too few examples (docs/benchmarks.md).
SMALL_BATCH = 16

AUTO = "auto"


@dataclass(frozen=True)
class BatchNormSync:
    """Whether this world's replicas synchronise batch-norm statistics, and why."""

    on: bool
    switch: str | None  # the backend's `runner` path ("horovod.sync_batch_norm"); None: it has none
    value: bool | str  # the switch as written: True, False or "auto"
    batch_size: int  # examples each replica normalises over
    replicas: int
    normalises: bool  # the network has batch normalisation

    @property
    def auto(self) -> bool:
        return self.value == AUTO

    def at(self, batch_size: int, replicas: int) -> BatchNormSync:
        """The same switch decided again at another world size (an elastic resize)."""
        return decide_with(self.switch, self.value, batch_size, replicas, self.normalises)

    def describe(self) -> str:
        """`sync batch norm on (auto: 8 examples per replica, below 16)`; "" when there is nothing to say
        (one replica, or no batch normalisation and the switch left at auto)."""
        if self.replicas <= 1 or (not self.normalises and self.auto):
            return ""
        state = "on" if self.on else "off"
        if self.switch is None:
            return f"sync batch norm off (this backend cannot synchronise: {self.batch_size} examples per replica)"
        if not self.auto:
            return f"sync batch norm {state} (runner.{self.switch}: {str(self.value).lower()})"
        relation = "below" if self.batch_size < SMALL_BATCH else "at least"
        return f"sync batch norm {state} (auto: {self.batch_size} examples per replica, {relation} {SMALL_BATCH})"


def switch_value(runner: Mapping[str, Any], switch: str | None) -> bool | str:
    """The switch as the pipeline sets it (`auto` when unset)."""
    if switch is None:
        return AUTO
    key, _, leaf = switch.partition(".")
    value = (runner.get(key) or {}).get(leaf, AUTO)
    return value if isinstance(value, bool) else AUTO


def decide_with(switch: str | None, value: bool | str, batch_size: int, replicas: int,
                normalises: bool) -> BatchNormSync:
    """`true`/`false` as written; `auto`: on with batch norm below SMALL_BATCH per replica (N > 1)."""
    if switch is None:
        on = False
    elif isinstance(value, bool):
        on = value
    else:
        on = replicas > 1 and normalises and batch_size < SMALL_BATCH
    return BatchNormSync(on, switch, value, batch_size, replicas, normalises)


def decide(runner: Mapping[str, Any], switch: str | None, batch_size: int, replicas: int,
           normalises: bool) -> BatchNormSync:
    """The decision for a backend whose switch is `switch` (its `Capabilities.sync_batch_norm`)."""
    return decide_with(switch, switch_value(runner, switch), batch_size, replicas, normalises)


def switch_for(runner: Mapping[str, Any]) -> str | None:
    """The `runner` path that synchronises batch norm for this pipeline before its backend exists
    (`dslrun validate`): the named backend's switch (None: it has none, as a parameter-server
    cluster), or with `runner.backend: auto` the first of `auto`'s backends that has one (what
    several processes run on)."""
    switches = [spec.capabilities.sync_batch_norm for spec in backend_registry.candidates(runner)
                if spec.capabilities.sync_batch_norm]
    return switches[0] if switches else None


def normalises(network: Mapping[str, Any]) -> bool:
    """Whether the network section has batch normalisation: as its type declares
    (`register(batch_norm=...)`: a detector's backbone), else as its parameters say (`batch_norm:
    true`, or batch-norm settings: a ResNet always normalises). The run asks the built model."""
    from dsl.language.errors import RegistryError
    from dsl.language.registry import lookup

    try:
        declared = lookup("network", str(network.get("type"))).batch_norm
    except RegistryError:
        declared = None
    if declared is not None:
        return bool(declared(dict(network)))
    return bool(network.get("batch_norm")) or "batch_norm_momentum" in network

