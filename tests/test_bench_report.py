"""The bench's CPU-time, peak and report helpers (bench/cases.py, bench/run.py), without training."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import run
from cases import Clock, cpu_by_thread, load_average, thread_cpu_seconds


def result(images_per_second: float, cpu_per_step: float, batch: int = 64, **extra) -> dict:
    return {"images_per_second": images_per_second, "cpu_seconds_per_step": cpu_per_step, "batch_per_rank": batch,
            "cpu_per_wall": 1.8, "startup_seconds": 9.0, "peak_rss_mb": 700.0, "loadavg": [2.0, 1.5, 1.0], **extra}


def test_cpu_ratio_is_per_image_and_above_one_when_the_first_costs_less():
    results = {"np2": [result(200, 0.25, batch=32)], "one": [result(210, 0.60, batch=64)]}
    # 0.25 s / 32 images = 7.8 ms against 0.60 s / 64 = 9.4 ms: np2 spends less per image
    assert run.cpu_ratio(results, "np2", "one")["median"] == (0.60 / 64) / (0.25 / 32)
    assert run.ratio(results, "np2", "one")["median"] == 200 / 210


def test_achieved_fraction_of_peak():
    peak = {"matmul_gflops": 160.0, "conv_gflops": 120.0}
    case = {"images_per_second": {"median": 150.0}}
    rates = run.achieved(case, 0.42, peak)
    assert rates["gflops"] == 150.0 * 0.42
    assert rates["of_conv_peak"] == 150.0 * 0.42 / 120.0 and rates["of_matmul_peak"] == 150.0 * 0.42 / 160.0


def test_report_table_has_cpu_and_peak_columns_for_every_case():
    peak_run = {"matmul_gflops": {"best": 160.0}, "resnet32_forward_gmac_per_image": 0.0691,
                "conv_gflops": {"best": 120.0, "stages": {"32x32x16": {"best": 80.0}, "8x8x64": {"best": 190.0}}}}
    runs = {"dslrun": [result(160, 0.72, between_calls_ms_per_step=0.1)], "fit": [result(150, 0.75)]}
    report = {"machine": {"cpu": "x", "cores": 2, "python": "3.11", "tensorflow": "2.15.1", "horovod": "0.28.1",
                          "commit": "abc"}, "quick": True, "repeats": 1,
              "cases": {name: run.case_summary(r) for name, r in runs.items()},
              "ratios": {name: {**value, "goal": goal} for name, (value, goal) in run.cpu_figures(runs).items()},
              "peak": run.peak_summary([peak_run]), "loadavg_at_group_boundaries": [[1.0, 2.0, 3.0]],
              "validate_50_files_seconds": {"median": 0.3, "min": 0.3, "max": 0.3},
              "import_tensorflow_seconds": {"median": 3.0, "min": 3.0, "max": 3.0}}
    table = run.markdown(report)
    assert "| P1 dslrun / fit, CPU time per image | 1.04 (1.04–1.04) |" in table
    row = next(line for line in table.splitlines() if line.startswith("| dslrun |"))
    gflops = 160 * 3 * 2 * 0.0691
    assert f"| {gflops:.0f} | {100 * gflops / 120:.0f} % | {100 * gflops / 160:.0f} % |" in row
    assert "| 0.720 (0.720–0.720) |" in row and "| 0.1 (0.1–0.1) |" in row
    fit_row = next(line for line in table.splitlines() if line.startswith("| fit |"))
    assert fit_row.count("|") == row.count("|")  # fit cannot time its calls: an empty cell, not a missing one
    assert "1.0/2.0/3.0" in table


def test_clock_counts_cpu_and_time_outside_the_calls_of_the_timed_steps_only():
    clock = Clock(warmup=2, launched_at=0.0, steps=3)
    for step in range(1, 6):
        sum(range(20000))  # some CPU
        clock.step_done(step, call_seconds=0.0 if step > 2 else 100.0)
    figures = clock.cpu_figures(3)
    assert figures["cpu_seconds_per_step"] >= 0.0
    assert figures["between_calls_ms_per_step"] >= 0.0  # the warm-up's long calls are not counted
    assert set(figures["cpu_seconds_by_thread"]) >= {"main", "other"}


def test_threads_are_read_and_the_main_thread_is_told_apart():
    assert os.getpid() in thread_cpu_seconds()
    main, pool = os.getpid(), os.getpid() + 1
    before = {main: 1.0, pool: 5.0, pool + 1: 0.2}
    after = {main: 1.5, pool: 9.0, pool + 1: 0.3, pool + 2: 0.25}  # a thread started meanwhile counts from 0
    assert cpu_by_thread(before, after, top=1) == {"main": 0.5, "1": 4.0, "other": 0.35}
    assert len(load_average()) == 3


def test_the_seed_table_compares_every_cell_to_one_process_on_the_mean():
    import quality_seeds

    def outcome(kind: str, ranks: int, seed: int, value: float | None) -> dict:
        return {"kind": kind, "ranks": ranks, "seed": seed, "ok": value is not None, **({"value": value} if value else {})}

    results = [outcome("local", 1, 1, 0.40), outcome("local", 1, 2, 0.20), outcome("horovod", 2, 1, 0.35),
               outcome("horovod", 2, 2, 0.30), outcome("collective", 2, 1, 0.50), outcome("collective", 2, 2, None)]
    lines = quality_seeds.table(results, [("local", 1), ("horovod", 2), ("collective", 2)], [1, 2]).splitlines()
    assert lines[2] == "| 1 process | 0.400 | 0.200 | 0.300 |  |"
    assert lines[3] == "| horovod x 2 | 0.350 | 0.300 | 0.325 | +0.025 |"
    assert lines[4] == "| collective x 2 | 0.500 | failed | 0.500 | +0.200 |"


def test_the_seed_table_of_a_ps_file_compares_to_its_one_worker():
    import quality_seeds

    results = [{"kind": "ps", "ranks": ranks, "seed": 42, "ok": True, "value": value}
               for ranks, value in ((1, 1.0), (4, 0.9))]
    lines = quality_seeds.table(results, [("ps", 1), ("ps", 4)], [42]).splitlines()
    assert lines[2] == "| 1 process | 1.000 | 1.000 |  |"
    assert lines[3] == "| ps x 4 | 0.900 | 0.900 | -0.100 |"
