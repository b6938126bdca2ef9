"""Time per training step spent in Horovod's allreduce, read from a Horovod timeline.

Horovod writes the timeline (`HOROVOD_TIMELINE=FILE`, rank 0 only) in Chrome's trace
format: one trace "process" per tensor, and for each reduction a `NEGOTIATE_ALLREDUCE`
span followed by an `ALLREDUCE` span (fusion-buffer copies and the Gloo/MPI exchange
itself, nested inside). Negotiation starts when rank 0's gradient is ready, which is
during its backward pass, so its spans overlap compute and are not a cost of their own;
the `ALLREDUCE` spans are the exchange. Tensors are fused and reduced together, so their
spans overlap: the time is the union of the spans over all tensors, not their sum. The file is written while training runs and
is cut off where the process stopped, so a missing closing bracket or a torn last event
is tolerated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_events(path: Path) -> list[dict[str, Any]]:
    """The timeline's events; a file cut off mid-write loses only its torn tail."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        return []
    try:
        return json.loads(text if text.endswith("]") else text.rstrip(",") + "]")
    except json.JSONDecodeError:
        cut = text.rfind("}")
        while cut > 0:
            try:
                return json.loads(text[: cut + 1].rstrip().rstrip(",") + "]")
            except json.JSONDecodeError:
                cut = text.rfind("}", 0, cut)
        return []


def top_level_spans(events: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """(start, end) in microseconds of each outermost span, by activity name."""
    spans: dict[str, list[tuple[float, float]]] = {}
    open_spans: dict[Any, list[tuple[str, float]]] = {}
    for event in events:
        phase, key = event.get("ph"), (event.get("pid"), event.get("tid"))
        if phase == "B":
            open_spans.setdefault(key, []).append((event.get("name", ""), float(event["ts"])))
        elif phase == "E" and open_spans.get(key):
            name, start = open_spans[key].pop()
            if not open_spans[key]:
                spans.setdefault(name, []).append((start, float(event["ts"])))
        elif phase == "X":
            start = float(event["ts"])
            spans.setdefault(event.get("name", ""), []).append((start, start + float(event.get("dur", 0))))
    return spans


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) microsecond intervals, in seconds."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1e6


def start_epoch_micros(events: list[dict[str, Any]]) -> float | None:
    """Wall-clock time (µs since the epoch) of the timeline's zero, from its first metadata event."""
    for event in events:
        start = (event.get("args") or {}).get("start_time_since_epoch_in_micros")
        if start is not None:
            return float(start)
    return None


def clip(intervals: list[tuple[float, float]], low: float, high: float) -> list[tuple[float, float]]:
    """The parts of `intervals` inside [low, high]."""
    return [(max(start, low), min(end, high)) for start, end in intervals if end > low and start < high]


def allreduce_per_step(path: Path, steps: int, window: tuple[float, float] | None = None) -> dict[str, float]:
    """Milliseconds per step spent in allreduce, within the timed `window` (wall-clock seconds).

    Without a window the whole file counts (warm-up included, where the first step waits
    for the slower rank's tracing). `steps` is the number of steps in the window.
    """
    events = read_events(path)
    spans = top_level_spans(events).get("ALLREDUCE", [])
    if window is not None:
        zero = start_epoch_micros(events)
        if zero is None:
            raise ValueError(f"{path}: no start time in the timeline; cannot place the timed window")
        spans = clip(spans, window[0] * 1e6 - zero, window[1] * 1e6 - zero)
    figures = {"allreduce_ms_per_step": 1000 * union_seconds(spans) / steps, "allreduce_spans": len(spans)}
    if window is not None:
        step_ms = 1000 * (window[1] - window[0]) / steps
        figures.update(step_ms=step_ms, allreduce_share=figures["allreduce_ms_per_step"] / step_ms)
    return figures
