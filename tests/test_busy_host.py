"""Ranks on one host's CPUs are told at the start when they cannot beat one process (dsl/distributed/busy_host.py)."""

from __future__ import annotations

import pytest

from dsl.distributed.busy_host import busy_host_warnings, say_busy_host


def test_ranks_with_a_core_each_are_told_to_expect_one_process_speed_at_best() -> None:
    (warning,) = busy_host_warnings(2, load=0.3, cores=2)
    assert warning.startswith("warning: 2 ranks on this host's 2 CPU cores have one core each: ")
    assert "expect one process's speed at best" in warning and "Ranks on one host's CPUs" in warning
    (over,) = busy_host_warnings(4, load=0.3, cores=2)
    assert "have fewer cores than ranks" in over
    (odd,) = busy_host_warnings(2, load=0.3, cores=3)  # TensorFlow gets 3 // 2 = 1 thread a rank
    assert "3 CPU cores have one core each" in odd


def test_a_busy_host_is_named_with_its_load() -> None:
    # The ranks' own start-up adds at most one each; the load beyond that is other work's.
    warnings = busy_host_warnings(2, load=6.5, cores=8)
    assert len(warnings) == 1 and warnings[0].startswith("warning: this host's load average is 6.5 on 8 cores: ")
    assert "every step waits for the slowest of the 2 ranks" in warnings[0]
    assert len(busy_host_warnings(2, load=6.5, cores=2)) == 2  # both facts, each its own line


@pytest.mark.parametrize(("ranks", "load", "cores"), [
    (1, 9.0, 2),    # one process: no exchange to wait at
    (2, 5.0, 8),    # the ranks themselves and two cores' worth more: under half of 8
    (2, 0.3, 4),    # two cores each, idle
    (4, 7.0, 16),   # a large host with cores to spare
])
def test_no_warning_where_the_ranks_have_the_cores(ranks: int, load: float, cores: int) -> None:
    assert busy_host_warnings(ranks, load=load, cores=cores) == []


def test_the_warnings_are_dslrun_lines_on_stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("os.getloadavg", lambda: (40.0, 40.0, 40.0))
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    say_busy_host(2)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"dslrun: {busy_host_warnings(2, load=40.0, cores=4)[0]}\n"
