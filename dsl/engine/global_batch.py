"""A loss normalised by a count over the whole global batch, however many replicas share it.

A detector divides its summed loss by the positive anchors of its batch. One process divides
by the positives of the global batch; a replica that divides by its own positives weighs its
examples by its own count, so the mean of the replicas' gradients is not the one-process
gradient, and differs more the fewer examples each replica holds (detectron2 and the TF Model
Garden all-reduce the count for this reason). `count_normaliser` gives each replica the
divisor that makes the mean of the replicas' gradients exactly the one-process gradient:
max(count over the global batch, 1) / replicas, from the mean of the replicas' counts.

The train step (dsl.engine.steps.make_step) sets the backend's in-graph average while it
traces the modeler's loss (a context variable, read at trace time only); a val step, a single
process, an asynchronous worker (its batch is its own update) and an XLA-compiled step (XLA on
CPU cannot compile the all-reduce) leave it unset, and the count stays this replica's.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Replicas:
    """The replicas whose batches one optimizer step averages, and the in-graph mean over them."""

    mean: Callable[[list[Any]], list[Any]]
    count: int


_REPLICAS: contextvars.ContextVar[Replicas | None] = contextvars.ContextVar("dslrun_step_replicas", default=None)


@contextlib.contextmanager
def sharing(replicas: Replicas | None) -> Iterator[None]:
    """While tracing a train step's loss: the replicas its batch is one part of (None: it is the whole)."""
    previous = _REPLICAS.set(replicas)
    try:
        yield
    finally:
        _REPLICAS.reset(previous)


def count_normaliser(count: Any) -> Any:
    """What this replica divides a loss summed over its examples by, given `count` (a float32
    scalar: its positives), so that the replicas' averaged gradient is the gradient of the
    global sum / max(global count, 1) — the one-process loss. Alone: max(count, 1)."""
    import tensorflow as tf

    replicas = _REPLICAS.get()
    count = tf.stop_gradient(tf.cast(count, tf.float32))
    if replicas is None or replicas.count <= 1:
        return tf.maximum(count, 1.0)
    mean = replicas.mean([count])[0]
    return tf.maximum(mean, 1.0 / replicas.count)
