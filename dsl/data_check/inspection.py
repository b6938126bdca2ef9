"""Inspecting a split's images, on every core once the split is large.

Reading a million image headers one after the other takes minutes (docs/benchmarks.md, "Cost
of scale: data"), and the machines users point ImageNet at have many cores. So the first
`SERIAL_FIRST` images are inspected in this process (the demo's splits, and the tests',
never start a worker), and the rest of a larger split goes to a pool of processes, one per
usable core, in order, so the report and its errors come out exactly as a serial pass would.
Workers come from a fresh fork server, never a fork of this process: `validate --build`
imported TensorFlow, whose threads a plain fork would copy half-way.

With a `Reservoir` (`--sample`), the images are offered to it instead and only its sample
is inspected, after the split is read (`dsl.data_check.sample`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from typing import Any

from dsl.data_check.examples import Example, Problem
from dsl.data_check.images import ImageFacts, inspect_bytes, inspect_file
from dsl.data_check.sample import Reservoir

SERIAL_FIRST = 2_000  # images inspected here before a pool is worth starting
CHUNK = 256  # examples per task sent to a worker

SAMPLED: Any = object()  # stands for the facts of an example offered to the reservoir instead


def needs_inspection(item: Example | Problem) -> bool:
    """Whether the example has an image whose facts are still to be read."""
    return isinstance(item, Example) and item.problem is None and item.facts is None and (
        item.path is not None or item.data is not None)


def inspect(item: Example) -> ImageFacts | str | None:
    """The example's image facts (inspecting its file or bytes now), why the image is unusable,
    or None for an example without an image (a text: its digest is all there is to count)."""
    if item.problem is not None:
        return item.problem
    if item.facts is not None:
        return item.facts
    if item.data is not None:
        facts = inspect_bytes(item.data)
        return f"{item.origin}: the image is {facts}" if isinstance(facts, str) else facts
    if item.path is None:
        return None
    facts = inspect_file(item.path)
    return f"image {item.path}: {facts}" if isinstance(facts, str) else facts


def inspected(
    items: Iterable[Example | Problem], reservoir: Reservoir | None = None
) -> Iterator[tuple[Example | Problem, Any]]:
    """(item, its facts / why unusable / None) in the order listed; a Problem with None, and
    with a reservoir every image example with `SAMPLED` (offered to the reservoir)."""
    if reservoir is not None:
        for item in items:
            if needs_inspection(item):
                assert isinstance(item, Example)
                reservoir.offer(item)
                yield item, SAMPLED
            else:
                yield item, None if isinstance(item, Problem) else inspect(item)
        return
    iterator = iter(items)
    done = 0
    for item in iterator:
        yield _pair(item)
        done += needs_inspection(item)
        if done >= SERIAL_FIRST and jobs() > 1:
            break
    else:
        return
    with multiprocessing_pool(jobs()) as pool:
        yield from pool.imap(_pair, iterator, chunksize=CHUNK)


def multiprocessing_pool(processes: int) -> Any:
    """A pool of `processes` workers forked from a fresh server (not from this process)."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["dsl.data_check.inspection"])
    return context.Pool(processes)


def _pair(item: Example | Problem) -> tuple[Example | Problem, Any]:
    if isinstance(item, Problem):
        return item, None
    facts = inspect(item)
    return (dataclasses.replace(item, data=None) if item.data is not None else item), facts


def jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
