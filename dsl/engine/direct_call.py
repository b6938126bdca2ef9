"""A compiled call that skips `tf.function`'s per-call lookup of its graph.

A `tf.function` finds the graph traced for its arguments' types at every call. For the train
call, whose first argument is a `tf.data` iterator, that lookup is a visible share of a small
model's step (bench/call_overhead.py alternates the call with its own concrete function; the
figures are in docs/benchmarks.md). The runner gives the call the same iterator for a whole
epoch, so the graph is looked up once per iterator and called directly after.
"""

from __future__ import annotations

import weakref
from typing import Any


class DirectCall:
    """`call(iterator, num_steps)` like the wrapped `tf.function`, which traces (and creates
    its variables) at the first call with each new iterator as ever; then its concrete function
    is called directly. The iterator is held weakly: an epoch's ended iterator is not kept alive."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self._iterator: weakref.ref[Any] | None = None
        self._graph: Any = None

    def __call__(self, iterator: Any, num_steps: Any) -> Any:
        if self._iterator is not None and self._iterator() is iterator:
            return self._graph(iterator, num_steps)
        outputs = self.function(iterator, num_steps)
        self._graph, self._iterator = self.function.get_concrete_function(iterator, num_steps), weakref.ref(iterator)
        return outputs

    def get_concrete_function(self, *args: Any) -> Any:
        return self.function.get_concrete_function(*args)
