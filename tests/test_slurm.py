"""A Slurm batch job of the shape docs/multihost.md gives: `sbatch` a script whose `srun` starts the ranks.

A one-node Slurm cluster is built for the test in a temporary directory (munged with its
own key and socket, slurmctld and slurmd on free ports, state and logs in the directory)
and torn down after it; nothing is left running. Debian's slurm-wlm 22.05 and munge are
needed (`apt-get install slurmctld slurmd slurm-client munge`), and root (slurmd starts
jobs as their user); otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsl.commands._tasks import free_ports

from e2e_support import MULTIRANK_ENV, synthetic_data

PROGRAMS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
            "scontrol": "slurm-client"}

SLURM_CONF = """\
ClusterName=dslrun{tag}
SlurmctldHost={host}
AuthType=auth/munge
AuthInfo=socket={dir}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

# The shape of docs/multihost.md's batch script, on one node and tiny data.
BATCH_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=dslrun-tiny
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --output={dir}/%x-%j.out
set -euo pipefail
cd {cwd}
echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, $SLURM_NTASKS tasks"
srun --mpi=pmix dslrun {pipeline} --set runner.model_dir={run}
"""

PIPELINE = """\
version: 1
name: tiny_slurm
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
network: {{type: simple_cnn, filters: [8], dense_units: 16}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
runner:
  max_epochs: 1
"""


def missing_reason() -> str | None:
    if os.geteuid() != 0:
        return f"a one-node Slurm cluster needs root (running as uid {os.geteuid()})"
    missing = sorted({package for program, package in PROGRAMS.items() if shutil.which(program) is None})
    if missing:
        return f"Slurm is not installed: apt-get install {' '.join(missing)}"
    return None


class OneNodeSlurm:
    """munged, slurmctld and slurmd of one private cluster on this machine."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.daemons: list[subprocess.Popen] = []
        workdir.mkdir(mode=0o700)
        for sub in ("munge", "state", "spool", "log"):
            (workdir / sub).mkdir(mode=0o700)
        key = workdir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, d_port = free_ports(2)
        self.conf = workdir / "slurm.conf"
        self.conf.write_text(SLURM_CONF.format(tag=os.getpid(), host=socket.gethostname().split(".")[0], dir=workdir,
                                               ctld_port=ctld_port, d_port=d_port, cpus=os.cpu_count()))
        self.env = {**MULTIRANK_ENV, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        munge = self.dir / "munge"
        self._daemon(["munged", "-F", "-f", f"--key-file={munge / 'munge.key'}", f"--socket={munge / 'socket'}",
                      f"--pid-file={munge / 'pid'}", f"--seed-file={munge / 'seed'}",
                      f"--log-file={self.dir / 'log' / 'munged.log'}"], "munged")
        self._wait(lambda: (munge / "socket").exists(), "munged did not create its socket")
        self._daemon(["slurmctld", "-D", "-i"], "slurmctld")
        self._daemon(["slurmd", "-D"], "slurmd")
        self._wait(lambda: "idle" in self.run(["sinfo", "-h", "-o", "%t"]).stdout, "the node did not become idle")

    def _daemon(self, argv: list[str], name: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "w")  # noqa: SIM115 (the daemon holds it)
        self.daemons.append(subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()

    def _wait(self, ready, what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            dead = [d.args[0] for d in self.daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in sorted((self.dir / "log").iterdir()))
                raise AssertionError(f"{what} (exited: {dead}):\n{logs}")
            time.sleep(0.3)

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, **kwargs)

    def job_state(self, job: str) -> dict[str, str]:
        text = self.run(["scontrol", "show", "job", job, "-o"]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def stop(self) -> None:
        self.run(["scancel", "--full", "--user=root"])  # this cluster's jobs only (SLURM_CONF)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in reversed(self.daemons):
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[OneNodeSlurm]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = OneNodeSlurm(tmp_path / "slurm")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    assert all(daemon.poll() is not None for daemon in cluster.daemons)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_batch_job_trains_on_two_ranks_started_by_srun(slurm: OneNodeSlurm, tmp_path: Path) -> None:
    data = synthetic_data(tmp_path / "data", num_train=64, num_val=16, image_size=16)
    pipeline = tmp_path / "tiny_slurm.yaml"
    pipeline.write_text(PIPELINE.format(data=data))
    script = tmp_path / "job.sh"
    script.write_text(BATCH_SCRIPT.format(dir=tmp_path, cwd=Path.cwd(), pipeline=pipeline, run=tmp_path / "run"))
    submitted = slurm.run(["sbatch", "--parsable", str(script)])
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 300
    while (state := slurm.job_state(job)).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        assert time.monotonic() < deadline, state
        time.sleep(1)
    out = (tmp_path / f"dslrun-tiny-{job}.out").read_text()
    assert state.get("JobState") == "COMPLETED" and state.get("ExitCode") == "0:0", f"{state}\n{out[-4000:]}"
    assert f"job {job} on " in out and ", 2 tasks" in out
    assert "identical on all 2 ranks" in out, out[-4000:]  # Horovod over the two srun ranks
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["mode"] == "train"] == [1]
