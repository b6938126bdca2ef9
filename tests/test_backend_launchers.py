"""A backend says how its ranks are started and named: the sweep and the CLI ask its spec (no TensorFlow).

`dslrun sweep` starts a trial of N ranks with the launcher the backend registered (`ranks=`),
`dslrun launch` for a cluster backend (`launch=`), one `dslrun run` otherwise; an error line
names the rank from the variables the backend's launcher sets (`rank=`). A plug-in backend
that registers its own launcher is started by it, with no edit of the sweep.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dsl.language import backend_registry
from dsl.language.backend_registry import RanksLaunch
from dsl.sweep.plan import SweepPlan
from dsl.sweep.trial import launcher


def plan(backend: str, ranks: int = 1, **sweep: Any) -> SweepPlan:
    pipeline = {"name": "p", "runner": {"backend": backend}, "sweep": {"ranks_per_trial": ranks, **sweep}}
    return SweepPlan("p.yaml", (), pipeline, [], "val/loss", "min", Path("/tmp/s"), "sqlite://", "p")


def test_one_rank_runs_dslrun_itself() -> None:
    assert launcher(plan("auto"), Path("t.yaml"), None) == [sys.executable, "-m", "dsl", "run", "t.yaml"]


def test_auto_with_ranks_asks_the_launcher_auto_recognises() -> None:
    command = launcher(plan("auto", 2, network_interfaces="eth0"), Path("t.yaml"), ["a:1", "b:1"])
    assert Path(command[0]).name == "horovodrun"
    assert command[1:] == ["-np", "2", "-H", "a:1,b:1", "--network-interfaces", "eth0", "--gloo",
                           sys.executable, "-m", "dsl", "run", "t.yaml"]


def test_a_cluster_backend_is_started_by_dslrun_launch() -> None:
    assert launcher(plan("ps", 2), Path("t.yaml"), None) == [
        sys.executable, "-m", "dsl", "launch", "--backend", "ps", "--workers", "2", "--ps", "1", "t.yaml"]
    assert launcher(plan("collective", 3), Path("t.yaml"), None)[3:8] == ["launch", "--backend", "collective",
                                                                          "--workers", "3"]


def test_a_plugin_backends_own_launcher_starts_its_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    def toyrun(ranks: int, hosts: Sequence[str], nics: str | None, argv: Sequence[str]) -> list[str]:
        return ["toyrun", f"--ranks={ranks}", *argv]

    backend_registry.load_all()
    monkeypatch.setattr(backend_registry, "_BACKENDS", dict(backend_registry._BACKENDS))
    backend_registry.register_backend("toy", summary="a toy", title="Toy", create=lambda params, environ=None: None,
                                      ranks=RanksLaunch("toyrun", toyrun), rank=lambda env: None)
    assert launcher(plan("toy", 4), Path("t.yaml"), None) == ["toyrun", "--ranks=4", sys.executable, "-m", "dsl",
                                                                "run", "t.yaml"]


@pytest.mark.parametrize(("environ", "expected"), [
    ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4"}, (1, 4)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, (3, 8)),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1"}, None),  # one rank is not "several"
    ({}, None),
])
def test_the_rank_comes_from_the_variables_the_backends_launcher_sets(environ: dict[str, str],
                                                                       expected: tuple[int, int] | None) -> None:
    assert backend_registry.rank_of(environ) == expected


def test_an_error_line_names_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsl.commands._common import rank_prefix

    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert rank_prefix() == "[rank 2] "
