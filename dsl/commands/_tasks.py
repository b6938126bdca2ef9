"""The tasks of a launched cluster: what each one runs, with which TF_CONFIG, and where.

Shared by the local launcher (dsl.commands.launch) and the placement on hosts
(dsl.commands._launch_hosts), which both plan tasks and neither owns them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsl.language import backend_registry
from dsl.language.backend_registry import BackendSpec, ClusterLaunch


@dataclass
class Task:
    """One process of the cluster: here, or on `host` through ssh and dsl.commands._remote_task."""

    role: str
    index: int
    command: list[str]
    env: dict[str, str]
    process: subprocess.Popen[Any] | None = None
    reader: threading.Thread | None = field(default=None, repr=False)
    host: str | None = None
    finishes: bool = False  # ends on its own with status 0 when training is done (collective workers)

    @property
    def label(self) -> str:
        return "chief" if self.role == "chief" else f"{self.role}:{self.index}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Signal the task's process group: here directly, on a host through the wrapper's stdin."""
        if not self.running:
            return
        assert self.process is not None
        if self.host is None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass
            return
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(f"{signal.Signals(signum).name[3:]}\n".encode())
            self.process.stdin.flush()
        except (OSError, ValueError):  # the connection is gone: ending ssh makes the far side stop the task
            self.end_local()

    def end_local(self) -> None:
        """SIGKILL the local process group: the task itself, or the ssh client of a remote task."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free TCP ports on `host` (all bound at once, so no two are equal)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_spec(workers: int, ps: int, host: str = "127.0.0.1") -> dict[str, list[str]]:
    """Loopback addresses for a chief, `workers` workers and `ps` parameter servers (none: a collective cluster)."""
    ports = iter(free_ports(1 + workers + ps, host))
    return {
        "chief": [f"{host}:{next(ports)}"],
        "worker": [f"{host}:{next(ports)}" for _ in range(workers)],
        "ps": [f"{host}:{next(ports)}" for _ in range(ps)],
    }


def launchable() -> list[BackendSpec]:
    """The backends `dslrun launch` can start (their registration declares a `ClusterLaunch`),
    the default first."""
    specs = [spec for spec in backend_registry.backends() if spec.launch is not None]
    return sorted(specs, key=lambda spec: not (spec.launch and spec.launch.default))


def cluster_launch(backend: str) -> ClusterLaunch:
    """How `dslrun launch --backend backend` starts its cluster."""
    launch = backend_registry.lookup(backend).launch
    if launch is None:
        raise ValueError(f"backend {backend!r} is not started by dslrun launch")
    return launch


def backend_settings(backend: str) -> tuple[str, ...]:
    """The `--set` overrides that make a pipeline run as a task of a `backend` cluster."""
    return cluster_launch(backend).settings


def plan_tasks(path: str, overrides: Sequence[str], cluster: dict[str, list[str]], evaluator: bool,
               backend: str | None = None) -> list[Task]:
    """The command and environment of every task; the evaluator is not part of the cluster spec.

    `backend` (by default the launchable backend with ps tasks when the cluster has some,
    else the one without) decides: a cluster without parameter servers is one where every
    task trains, and its TF_CONFIG names only the chief and the workers.
    """
    if backend is None:
        backend = next(spec.name for spec in launchable()
                       if spec.launch and spec.launch.parameter_servers == bool(cluster.get("ps")))
    launch = cluster_launch(backend)
    if not launch.parameter_servers:
        cluster = {job: addresses for job, addresses in cluster.items() if addresses}
    command = [sys.executable, "-m", "dsl", "run", path]
    for override in (*overrides, *launch.settings):
        command += ["--set", override]
    roles = [("chief", 0)] + [("worker", i) for i in range(len(cluster.get("worker", [])))]
    roles += [("ps", i) for i in range(len(cluster.get("ps", [])))] + ([("evaluator", 0)] if evaluator else [])
    tasks = []
    for role, index in roles:
        config = {"cluster": cluster, "task": {"type": role, "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(config), "PYTHONUNBUFFERED": "1"}
        tasks.append(Task(role, index, list(command), env, finishes=not launch.parameter_servers and role == "worker"))
    return tasks
