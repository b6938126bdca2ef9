"""`dslrun launch --backend ps|collective --workers N [--ps M] [--hosts A,B] FILE`: a whole cluster.

The backends it can start are those whose registration declares a `ClusterLaunch`
(dsl.language.backend_registry); the two built-in ones:

`--backend ps`: a parameter-server cluster (chief, N workers, M ps, optionally an evaluator).
`--backend collective`: N training processes of TensorFlow's allreduce (a chief and N-1
workers; every one trains, and each ends on its own when training ends).

One process per task, each running the same
`python -m dsl run FILE` with its own TF_CONFIG: here on free loopback ports, or with
`--hosts` spread over those hosts through ssh, on free ports each host names
(dsl.commands._launch_hosts: placement, addresses, environment). Their output is streamed
with a task prefix (`[chief] ...`, `[worker:0] ...`) either way.

Tear-down, so that no process outlives the launcher:
- the chief's exit ends the job (workers and ps serve forever otherwise); its status is the
  launcher's; the evaluator gets `--evaluator-timeout` seconds to evaluate the last checkpoint,
  collective workers `--grace-seconds` to finish as the chief did;
- any other task exiting first is a failure (a collective worker: exiting non-zero): the job
  stops, naming that task;
- SIGTERM/SIGINT to the launcher: the chief gets SIGTERM (it saves a checkpoint), then
  every task is terminated, and killed after `--grace-seconds`;
- each task runs in its own process group and is started with PR_SET_PDEATHSIG, so the
  kernel kills it even when the launcher itself is killed with SIGKILL;
- a task on another host runs under a small wrapper (dsl.commands._remote_task): signals
  reach it as lines on its ssh connection, and when that connection closes (the launcher
  or its ssh client died) the wrapper stops the task, SIGTERM then SIGKILL after
  `--grace-seconds`, so nothing is left on any host.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import click

from dsl.commands._common import echo_err, pipeline_or_exit, set_option
from dsl.commands._tasks import Task, backend_settings, cluster_launch, cluster_spec, launchable, plan_tasks
from dsl.distributed.hosts import Ssh, make_ssh, parse_hosts, parse_interfaces, ssh_options
from dsl.language.backend_registry import either

_PR_SET_PDEATHSIG = 1
REMOTE_KILL_SECONDS = 10.0


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL this task when the launcher dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux: process groups still apply
        pass


class Cluster:
    """Starts the tasks, streams their output, and stops them all."""

    def __init__(self, tasks: list[Task], grace_seconds: float, out: IO[str] | None = None) -> None:
        self.tasks = tasks
        self.grace_seconds = grace_seconds
        self.out = out or sys.stdout
        self._lock = threading.Lock()

    def start(self) -> None:
        for task in self.tasks:
            task.process = subprocess.Popen(
                task.command, env=task.env, stdin=subprocess.PIPE if task.host else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )
            task.reader = threading.Thread(target=self._stream, args=(task,), daemon=True)
            task.reader.start()

    def _stream(self, task: Task) -> None:
        assert task.process is not None and task.process.stdout is not None
        prefix = f"[{task.label}] "
        for raw in iter(task.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                self.out.write(prefix + line + "\n")
                self.out.flush()

    def say(self, message: str) -> None:
        with self._lock:
            echo_err(f"dslrun launch: {message}")

    def task(self, role: str) -> Task | None:
        return next((task for task in self.tasks if task.role == role), None)

    def first_failure(self) -> Task | None:
        """A task other than the chief that ended (workers and ps never end on their own)."""
        for task in self.tasks:
            if task.role == "chief" or task.process is None:
                continue
            code = task.process.poll()
            if code is not None and not ((task.role == "evaluator" or task.finishes) and code == 0):
                return task
        return None

    def signal_task(self, task: Task, signum: int) -> None:
        task.signal(signum)

    def wait(self, tasks: list[Task], seconds: float) -> bool:
        """Wait up to `seconds` for `tasks` to end; True when they all did."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(task.process is None or task.process.poll() is not None for task in tasks):
                return True
            time.sleep(0.1)
        return all(task.process is None or task.process.poll() is not None for task in tasks)

    def stop(self, tasks: list[Task] | None = None) -> None:
        """SIGTERM each task's process group, SIGKILL what is left after the grace period, reap."""
        tasks = self.tasks if tasks is None else tasks
        for task in tasks:
            self.signal_task(task, signal.SIGTERM)
        if not self.wait(tasks, self.grace_seconds):
            for task in tasks:
                if task.running:
                    self.say(f"{task.label} did not stop within {self.grace_seconds:g} s; killing it")
                self.signal_task(task, signal.SIGKILL)
            # A remote task's wrapper reports the kill by ending; give the order time to travel.
            self.wait([task for task in tasks if task.host], REMOTE_KILL_SECONDS)
        for task in tasks:
            if task.process is not None:
                # The group may hold more than the task itself: make sure nothing of it is left.
                task.end_local()
                task.process.wait()
        for task in tasks:
            if task.reader is not None:
                task.reader.join(timeout=2)


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_cluster(cluster: Cluster, evaluator_timeout: float, poll_seconds: float = 0.2) -> int:
    """Supervise a started cluster until the chief ends or something fails; returns the exit status."""
    chief = cluster.task("chief")
    assert chief is not None and chief.process is not None
    while True:
        code = chief.process.poll()
        if code is not None:
            return _after_chief(cluster, code, evaluator_timeout)
        failed = cluster.first_failure()
        if failed is not None:
            status = failed.process.returncode if failed.process else 1
            cluster.say(f"task {failed.label} exited with status {status} before the chief finished; "
                        "stopping the cluster (run the same command again to resume from the last checkpoint)")
            cluster.stop()
            return status if status and status > 0 else 1
        time.sleep(poll_seconds)


def _after_chief(cluster: Cluster, code: int, evaluator_timeout: float) -> int:
    evaluator = cluster.task("evaluator")
    finishing = [task for task in cluster.tasks if task.finishes]
    if code == 0 and finishing and not cluster.wait(finishing, cluster.grace_seconds):
        cluster.say(f"a worker did not finish within {cluster.grace_seconds:g} s of the chief; stopping it")
    servers = [task for task in cluster.tasks if task.role in ("worker", "ps")]
    cluster.stop(servers)
    if evaluator is not None:
        if code == 0 and not cluster.wait([evaluator], evaluator_timeout):
            cluster.say(f"the evaluator did not finish within {evaluator_timeout:g} s of the chief; stopping it")
        cluster.stop([evaluator])
    if code != 0:
        cluster.say(f"the chief exited with status {code}")
    return code if code >= 0 else 128 - code


@click.command("launch")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@set_option
@click.option("--backend", type=click.Choice([spec.name for spec in launchable()]),
              default=launchable()[0].name, show_default=True,
              help=f"The cluster to start: {either([spec.launch.help for spec in launchable() if spec.launch])}.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Number of worker tasks (collective: training processes, the chief included).")
@click.option("--ps", "num_ps", type=click.IntRange(min=1), default=None, help="Number of ps tasks (ps only; default 1).")
@click.option("--evaluator", is_flag=True, help="Also start an evaluator task that evaluates every checkpoint once.")
@click.option("--grace-seconds", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long tasks may take to stop after SIGTERM before they are killed.")
@click.option("--evaluator-timeout", type=click.FloatRange(min=0), default=600.0, show_default=True,
              help="How long the evaluator may still run after the chief finished.")
@click.option("-H", "--hosts", default=None, metavar="HOSTA,HOSTB",
              help="Spread the tasks over these hosts (ssh; chief on the first) instead of running them here.")
@click.option("--network-interfaces", default=None, metavar="NICS",
              help="With --hosts: give TF_CONFIG the address of the first of these interfaces on each host "
                   "(default: the address ssh reached).")
@click.option("-x", "--env", "env_vars", multiple=True, metavar="NAME[=VALUE]",
              help="With --hosts: also pass this environment variable to every task (repeatable).")
@ssh_options
def command(path: str, overrides: tuple[str, ...], backend: str, workers: int, num_ps: int | None, evaluator: bool,
            grace_seconds: float, evaluator_timeout: float, hosts: str | None, network_interfaces: str | None,
            env_vars: tuple[str, ...], **ssh: Any) -> None:
    """Start a parameter-server or collective-allreduce cluster that trains FILE, here or across --hosts;
    every task's output is prefixed with its name."""
    if not cluster_launch(backend).parameter_servers:
        given = [name for name, value in (("--ps", num_ps), ("--evaluator", evaluator)) if value]
        if given:
            with_ps = either([spec.name for spec in launchable() if spec.launch and spec.launch.parameter_servers])
            raise click.UsageError(f"{', '.join(given)} only make sense with --backend {with_ps}: every task of a "
                                   f"{backend} cluster trains (evaluate its checkpoints with `dslrun eval`)")
        # N training processes: the chief and N-1 workers, no ps.
        workers, num_ps = workers - 1, 0
    elif num_ps is None:
        num_ps = 1
    if hosts is None:
        given = [name for name, value in (("--network-interfaces", network_interfaces), ("--env", env_vars),
                 ("--ssh-port", ssh["ssh_port"]), ("--ssh-identity-file", ssh["ssh_identity_file"]),
                 ("--ssh-config", ssh["ssh_config"])) if value]
        if given:
            raise click.UsageError(f"{', '.join(given)} only make sense with --hosts")
    host_names = parse_hosts(hosts) if hosts is not None else None
    model_dir = pipeline_or_exit(path, (*overrides, *backend_settings(backend))).runner.model_dir
    if host_names is None:
        if model_dir:
            from dsl.engine.rundir import clear_done

            clear_done(Path(model_dir))  # a finished earlier run's marker would stop the evaluator at once
        tasks = plan_tasks(path, overrides, cluster_spec(workers, num_ps), evaluator, backend)
    else:
        tasks = _remote_tasks(path, overrides, host_names, workers, num_ps, evaluator, grace_seconds, model_dir,
                              network_interfaces, env_vars, make_ssh(**ssh))
    cluster = Cluster(tasks, grace_seconds)
    sys.exit(_supervise(cluster, evaluator_timeout))


def _remote_tasks(path: str, overrides: tuple[str, ...], hosts: list[str], workers: int, num_ps: int,
                  evaluator: bool, grace: float, model_dir: str | None, network_interfaces: str | None,
                  env_vars: tuple[str, ...], ssh: Ssh) -> list[Task]:
    """The tasks placed on the hosts; a host that cannot take them ends the launch, named, before any starts."""
    from dsl.commands import _launch_hosts
    from dsl.distributed.preflight import pipeline_files

    env = _launch_hosts.forwarded_env(pipeline_files(path), env_vars)
    try:
        return _launch_hosts.plan_remote_tasks(path, overrides, hosts, workers, num_ps, evaluator, ssh,
                                               parse_interfaces(network_interfaces), env, grace, model_dir)
    except _launch_hosts.HostErrors as exc:
        for error in exc.errors:
            echo_err(f"dslrun launch: {error}")
        echo_err(f"dslrun launch: nothing was started; check the hosts with "
                 f"`dslrun doctor --hosts {','.join(hosts)} {path}`")
        sys.exit(1)
    except KeyboardInterrupt:
        echo_err("dslrun launch: interrupted while asking the hosts for ports; nothing was started")
        sys.exit(128 + signal.SIGINT)


def _supervise(cluster: Cluster, evaluator_timeout: float) -> int:
    """Run the cluster with SIGTERM/SIGINT turned into an orderly stop."""

    def interrupted(signum: int, frame: Any) -> None:
        raise _Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        cluster.start()
        cluster.say(" ".join(f"{t.label}={t.host or t.process.pid}" for t in cluster.tasks if t.process))
        return run_cluster(cluster, evaluator_timeout)
    except _Interrupted as exc:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # finish the tear-down even when signalled again
        cluster.say(f"interrupted by {exc}: stopping the chief (it saves a checkpoint), then every task")
        chief = cluster.task("chief")
        if chief is not None:
            cluster.stop([chief])
        cluster.stop()
        return 128 + exc.signum
    finally:
        if any(task.process is not None and task.process.poll() is None for task in cluster.tasks):
            cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
