"""`dslrun launch --hosts hostA,hostB`: the parameter-server cluster spread over hosts.

Placement: the tasks, in the order chief, workers, ps (then the evaluator), are dealt
round-robin over the hosts in the order given, so the chief runs on the first host — as
rank 0 does under horovodrun — and the launching machine only supervises (it may be a
login node). With two hosts, 2 workers and 1 ps: chief and worker:1 on the first host,
worker:0 and ps:0 on the second.

Before anything starts, each host is asked over ssh (the same interpreter path as here,
in the same working directory) for as many free TCP ports as tasks it will serve, and
for its address: the address the ssh connection arrived at, or with
`--network-interfaces` the first of those interfaces' IPv4 addresses there. These make
every task's TF_CONFIG. A host that cannot answer stops the launch, named, before any
task starts (`dslrun doctor --hosts ... FILE` checks much more).

Each task runs through dsl.commands._remote_task, which stops it when its ssh connection
goes; the launcher signals it by writing the signal's name to that connection. The task's
environment is the remote login environment plus TF_CONFIG, PYTHONUNBUFFERED,
TF_CPP_MIN_LOG_LEVEL, the variables the pipeline files name as `${NAME}` that are set
here, and those given with `--env NAME[=VALUE]`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsl.commands._tasks import Task, plan_tasks
from dsl.distributed.hosts import HostError, Ssh
from dsl.language.errors import DslError

WRAPPER_SOURCE = Path(__file__).with_name("_remote_task.py")
ALWAYS_FORWARDED = ("TF_CPP_MIN_LOG_LEVEL",)
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def task_roles(workers: int, num_ps: int, evaluator: bool) -> list[tuple[str, int]]:
    """(role, index) of every task, in placement order."""
    return ([("chief", 0)] + [("worker", i) for i in range(workers)] + [("ps", i) for i in range(num_ps)]
            + ([("evaluator", 0)] if evaluator else []))


def place(roles: Sequence[tuple[str, int]], hosts: Sequence[str]) -> dict[tuple[str, int], str]:
    """Round-robin: the n-th task on host n mod len(hosts); the chief on the first host."""
    return {role: hosts[i % len(hosts)] for i, role in enumerate(roles)}


def address(answer: dict[str, Any], host: str, interfaces: Sequence[str]) -> str:
    """The address other tasks reach `host` at (from the probe's answer)."""
    for name in interfaces:
        info = answer.get("interfaces", {}).get(name)
        if info and info.get("up"):
            ipv4 = [a for a in info.get("addresses", []) if ":" not in a]
            if ipv4:
                return str(ipv4[0])
    if interfaces:
        raise HostError(host, f"none of {', '.join(interfaces)} is up with an IPv4 address there", "interface")
    if not answer.get("ssh_address"):
        raise HostError(host, "cannot tell its address (SSH_CONNECTION is not set there); pass --network-interfaces",
                        "interface")
    return str(answer["ssh_address"])


def host_port(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def ask_hosts(ssh: Ssh, hosts: Sequence[str], counts: Counter[str], interfaces: Sequence[str], cwd: str,
              remove_on_first: Sequence[str]) -> dict[str, tuple[str, list[int]]]:
    """host -> (address, free ports); every host's problem raised together as one HostError list."""
    from dsl.distributed.preflight import for_each_host, run_probe

    def ask(host: str) -> tuple[str, list[int]]:
        request = {"action": "ports", "cwd": cwd, "count": counts[host], "interfaces": bool(interfaces),
                   "remove": list(remove_on_first) if host == hosts[0] else []}
        answer = run_probe(ssh, host, request, timeout=60 + ssh.connect_timeout)
        return address(answer, host, interfaces), answer["ports"]

    answers = for_each_host(ask, hosts)
    errors = [answer for answer in answers.values() if isinstance(answer, HostError)]
    if errors:
        raise HostErrors(errors)
    return answers


class HostErrors(DslError):
    """Every host's problem at once, so one run of `launch --hosts` names them all."""

    def __init__(self, errors: list[HostError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def forwarded_env(pipeline_files: Sequence[str], extra: Sequence[str]) -> dict[str, str]:
    """The variables every remote task gets from here (see the module docstring)."""
    names = list(ALWAYS_FORWARDED)
    for path in pipeline_files:
        try:
            names += _REFERENCE.findall(Path(path).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    env = {name: os.environ[name] for name in names if name in os.environ}
    for item in extra:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
    return env


def plan_remote_tasks(path: str, overrides: Sequence[str], hosts: Sequence[str], workers: int, num_ps: int,
                      evaluator: bool, ssh: Ssh, interfaces: Sequence[str], env: dict[str, str], grace: float,
                      model_dir: str | None) -> list[Task]:
    """Every task's ssh command, with TF_CONFIG naming the hosts' addresses and free ports."""
    cwd = os.getcwd()
    roles = task_roles(workers, num_ps, evaluator)
    placement = place(roles, hosts)
    counts = Counter(host for role, host in placement.items() if role[0] != "evaluator")
    done_marker = [os.path.join(cwd, model_dir, "DONE")] if model_dir else []  # dsl.engine.rundir.DONE_MARKER
    answers = ask_hosts(ssh, hosts, counts, interfaces, cwd, done_marker)
    free = {host: iter(ports) for host, (_, ports) in answers.items()}
    cluster: dict[str, list[str]] = {"chief": [], "worker": [], "ps": []}
    for role in roles:
        if role[0] != "evaluator":
            host = placement[role]
            cluster[role[0]].append(host_port(answers[host][0], next(free[host])))
    tasks = plan_tasks(path, overrides, cluster, evaluator)
    wrapper = WRAPPER_SOURCE.read_text(encoding="utf-8")
    for task in tasks:
        task.host = placement[(task.role, task.index)]
        request = {"label": task.label, "cwd": cwd, "grace": grace, "command": task.command,
                   "env": {**env, "TF_CONFIG": task.env["TF_CONFIG"], "PYTHONUNBUFFERED": "1"}}
        task.command = ssh.argv(task.host, [sys.executable, "-c", wrapper, json.dumps(request)])
        task.env = dict(os.environ)
    return tasks
