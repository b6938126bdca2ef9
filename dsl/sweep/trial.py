"""One trial: a dslrun run in its own directory, started the way its pipeline runs, as one process tree.

The trial's pipeline is written out (`trial.yaml`, the resolved pipeline with the trial's
values and its run directory, without the `sweep:` section) and run as a user would run it:
`dslrun run` for one process, the backend's launcher of ranks for several (horovodrun -np N for
Horovod), `dslrun launch` for a cluster backend (collective, parameter servers); the backend's
spec says which. Those launchers pick free ports for each trial themselves, so trials at once
never share one. The tree runs in its own session
and dies with the sweep (PR_SET_PDEATHSIG); stopping it (pruned, hung, Ctrl-C) sends SIGTERM
to every process of it — the chief saves a checkpoint — and SIGKILL to what is left after the
grace period, so no rank outlives its trial.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dsl.language import backend_registry
from dsl.language.errors import DslError
from dsl.sweep.checks import trial_backend
from dsl.sweep.plan import SweepPlan

GRACE_SECONDS = 15.0
_PR_SET_PDEATHSIG = 1
# What a launcher puts before each line of a rank: horovodrun's and mpirun's `[1,0]<stderr>:`,
# dslrun launch's `[chief] ` and `[worker:0] `.
_RANK_PREFIX = re.compile(r"^(\[\d+,\d+\]<std(?:out|err)>:|\[[a-z]+(?::\d+)?\] )")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def launcher(plan: SweepPlan, pipeline_file: Path, hosts: list[str] | None) -> list[str]:
    """The command that runs `pipeline_file` the way its runner runs it, with the sweep's ranks per trial.

    The backend's spec says how: a cluster that `dslrun launch` starts, or its launcher of ranks
    (`auto`: the launcher `auto` recognises). A trial given `hosts` (sweep.hosts) is started by
    that launcher even with one rank: that is how it reaches another host, and the sweep's slots
    are spent where they were given."""
    python = [sys.executable, "-m", "dsl"]
    run = ["run", *(arg for module in plan.plugins for arg in ("--plugin", module)), str(pipeline_file)]
    ranks = plan.ranks
    spec = trial_backend(plan.pipeline)
    if spec is not None and spec.launch is not None:  # a cluster `dslrun launch` starts
        extra = ["--ps", "1"] if spec.launch.parameter_servers else []
        return [*python, "launch", "--backend", plan.backend, "--workers", str(ranks), *extra, str(pipeline_file)]
    if ranks == 1 and not hosts:
        return [*python, *run]
    starter = backend_registry.rank_launcher(plan.backend)
    if starter is None or starter.ranks is None:  # refused by validate (ranks_per_trial, sweep.hosts)
        raise DslError(f"runner.backend {plan.backend} has no launcher of several ranks")
    nics = plan.sweep.get("network_interfaces")
    return starter.ranks.command(ranks, hosts or [], str(nics) if nics else None, [*python, *run])


@dataclass
class TrialProcess:
    """A started trial: its process tree, its run directory and how far its metrics were read."""

    number: int
    run_dir: Path
    metrics_file: Path
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float = field(default_factory=time.monotonic)
    records_read: int = 0
    values: list[float] = field(default_factory=list)
    hosts: list[str] | None = None

    @classmethod
    def start(cls, number: int, run_dir: Path, command: list[str], metrics_format: str,
              hosts: list[str] | None = None, extra_env: dict[str, str] | None = None) -> TrialProcess:
        run_dir.mkdir(parents=True, exist_ok=True)
        log = open(run_dir / "trial.log", "ab")  # noqa: SIM115 - the trial writes it until it ends
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **(extra_env or {})}
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True, preexec_fn=_die_with_parent)
        return cls(number, run_dir, run_dir / f"metrics.{metrics_format}", process, log, hosts=hosts)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def new_values(self, phase: str, output: str) -> list[float]:
        """The metric of each `phase` record written since the last call (rank 0's metrics file)."""
        records = _read_records(self.metrics_file)
        fresh = records[self.records_read:]
        self.records_read = len(records)
        found = []
        for record in fresh:
            if record.get("mode") == phase and output in record:
                try:
                    found.append(float(record[output]))
                except (TypeError, ValueError):
                    continue
        self.values += found
        return found

    def new_steps(self, phase: str, output: str) -> list[tuple[int, float]]:
        """`new_values` numbered as Optuna's steps: the n-th `phase` record of the trial is step n.
        One call can find several (a resumed trial's file is read from its start)."""
        fresh = self.new_values(phase, output)
        return list(enumerate(fresh, start=len(self.values) - len(fresh) + 1))

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self, grace_seconds: float = GRACE_SECONDS) -> None:
        """SIGTERM the whole tree (the chief checkpoints), SIGKILL what is left after `grace_seconds`, reap."""
        tree = [self.process.pid, *descendants(self.process.pid)]
        _signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.1)
        tree += [pid for pid in descendants(self.process.pid) if pid not in tree]
        alive = [pid for pid in tree if _alive(pid)]
        if alive:
            # Ranks whose launcher has exited are orphans now: give them the same grace before SIGKILL.
            deadline = max(deadline, time.monotonic() + 2.0)
            while time.monotonic() < deadline and any(_alive(pid) for pid in alive):
                time.sleep(0.1)
            _signal_all([pid for pid in alive if _alive(pid)], signal.SIGKILL)
            deadline = time.monotonic() + 5.0  # a killed process lingers until the kernel has torn it down
            while time.monotonic() < deadline and any(_alive(pid) for pid in alive):
                time.sleep(0.05)
        self.process.wait()
        self.close()

    def close(self) -> None:
        if not self.log.closed:
            self.log.close()

    def last_lines(self, count: int = 3) -> str:
        """The log's last lines that say something (for a failure's reason)."""
        try:
            lines = (self.run_dir / "trial.log").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        useful = [_RANK_PREFIX.sub("", line).strip() for line in lines if line.strip() and not line.startswith("$ ")]
        # dslrun's own last word first: other lines (MLflow's "View run" links, a rank's
        # traceback) may follow it in the log.
        own = [line for line in useful if line.startswith(("dslrun: error:", "dslrun: failed:"))]
        errors = [line for line in useful if "error" in line.lower()]
        return " | ".join((own or errors or useful)[-count:])


def _read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a metrics file, jsonl or csv; a line being written is left for the next read."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".csv":
        import csv
        import io

        return list(csv.DictReader(io.StringIO(text)))
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def descendants(root: int) -> list[int]:
    """PIDs of every process below `root` (from /proc), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def shown_number(trial: Any) -> int:
    """The trial's number as the user knows it: a re-run of an interrupted trial keeps the number of the
    trial it continues (Optuna numbers every attempt anew)."""
    return int(trial.user_attrs.get("trial_of", trial.number))
