"""The benchmark's allreduce figure: spans read from a Horovod timeline, fused spans counted once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from timeline import allreduce_per_step, read_events, top_level_spans, union_seconds

# What Horovod writes (horovod/common/timeline.cc): one "process" per tensor, B/E spans with
# nested activities, X ticks for each rank that reported ready, the file closed after each event.
TIMELINE = """[
{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":1}},
{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_a"}},
{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1000, "pid": 1},
{"ph": "X", "name": "0", "ts": 1000, "pid": 1, "dur": 0},
{"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "grad_b"}},
{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1500, "pid": 2},
{"ph": "X", "name": "1", "ts": 3000, "pid": 1, "dur": 0},
{"ph": "E", "ts": 3000, "pid": 1},
{"ph": "E", "ts": 3000, "pid": 2},
{"ph": "B", "name": "ALLREDUCE", "ts": 3000, "pid": 1},
{"ph": "B", "name": "ALLREDUCE", "ts": 3000, "pid": 2},
{"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 3100, "pid": 1},
{"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 3100, "pid": 2},
{"ph": "E", "ts": 4900, "pid": 1},
{"ph": "E", "ts": 4900, "pid": 2},
{"ph": "E", "ts": 5000, "pid": 1},
{"ph": "E", "ts": 5000, "pid": 2},
{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 9000, "pid": 1},
{"ph": "E", "ts": 9500, "pid": 1},
{"ph": "B", "name": "ALLREDUCE", "ts": 9500, "pid": 1},
{"ph": "E", "ts": 10500, "pid": 1}]"""


def test_fused_tensors_count_once_and_nested_activities_are_inside() -> None:
    spans = top_level_spans(json.loads(TIMELINE))
    assert sorted(spans["ALLREDUCE"]) == [(3000, 5000), (3000, 5000), (9500, 10500)]
    assert "GLOO_ALLREDUCE" not in spans  # nested: part of its ALLREDUCE span
    assert union_seconds(spans["ALLREDUCE"]) == 0.003  # 2 ms + 1 ms, the fused pair once
    assert union_seconds(spans["NEGOTIATE_ALLREDUCE"]) == 0.0025  # 1000-3000 and 9000-9500


def test_per_step_figures(tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    path.write_text(TIMELINE)
    assert allreduce_per_step(path, steps=2) == {"allreduce_ms_per_step": 1.5, "allreduce_spans": 3}


def test_only_the_timed_window_counts(tmp_path: Path) -> None:
    # The timeline's zero is 1 µs after the epoch; the window 0.004-0.010 s cuts the first
    # fused span to its last 1000 µs and the second to its first 500 µs.
    path = tmp_path / "timeline.json"
    path.write_text(TIMELINE)
    figures = allreduce_per_step(path, steps=3, window=(0.004001, 0.010001))
    assert figures["allreduce_spans"] == 3
    assert abs(figures["allreduce_ms_per_step"] - 0.5) < 1e-9  # (1.0 + 0.5) ms over 3 steps
    assert abs(figures["step_ms"] - 2.0) < 1e-9 and abs(figures["allreduce_share"] - 0.25) < 1e-9


def test_a_timeline_cut_off_mid_event_keeps_what_was_whole(tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    cut = TIMELINE.index('{"ph": "E", "ts": 10500')
    path.write_text(TIMELINE[: cut + 12])  # killed while writing the last event
    spans = top_level_spans(read_events(path))
    assert len(spans["ALLREDUCE"]) == 2  # the unfinished third span is left out
    path.write_text("")
    assert read_events(path) == []

