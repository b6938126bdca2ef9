"""`dslrun launch --backend ps --hosts hosta,hostb`: a parameter-server cluster across two real hosts.

The hosts are network namespaces with their own sshd (tests/testhosts.py); the tasks reach
each other over the hosts' bridge addresses, as on a real network. Each test checks
that the tasks really ran on both hosts (their processes, seen inside each host's
namespace, with TF_CONFIG naming both hosts' addresses) and that nothing of the job is
left on either host afterwards: after a normal end, after the launcher is SIGKILLed
(the remote wrapper sees its ssh connection close), and after a remote worker dies.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from testhosts import test_hosts  # noqa: F401 (the session fixture)

from dsl.commands._launch_hosts import forwarded_env, host_port, place, task_roles

from e2e_support import DSLRUN, ENV, dslrun, synthetic_data

REPO = Path(__file__).resolve().parents[1]

TINY = """\
version: 1
name: tiny_ps_hosts
seed: 3
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
  shuffle_buffer: 64
network: {{type: simple_cnn, filters: [8, 16], dense_units: 32}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: checkpoint, every_n_epochs: 1, max_to_keep: 10}}
runner:
  backend: ps
  model_dir: {run}
  workflow: [[train, 1], [val, 1]]
  max_epochs: {epochs}
  steps_per_call: 2
"""


# ----------------------------------------------------------------------------- helpers
class HostLauncher:
    """`dslrun launch --hosts hosta,hostb ...` on the login node, its output in a file, the job's
    processes on each host recorded while it runs."""

    def __init__(self, hosts, tmp_path: Path, *args: str) -> None:
        self.hosts = hosts
        self.log = tmp_path / "launch.log"
        with open(self.log, "w") as handle:
            self.process = hosts.popen([*DSLRUN, "launch", "--hosts", "hosta,hostb", *args], stdout=handle,
                                       stderr=subprocess.STDOUT, env={**hosts.env, "TF_CPP_MIN_LOG_LEVEL": "3"})
        self.seen: dict[str, dict[int, dict[str, str]]] = {name: {} for name in hosts.hosts}

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def record(self) -> None:
        """The tasks now running in each host: pid -> TF_CONFIG (wrappers and ssh sessions left out)."""
        for name, host in self.hosts.hosts.items():
            for process in host.processes():
                if process.argv[1:4] == ["-m", "dsl", "run"] and "TF_CONFIG" in process.environ:
                    self.seen[name][process.pid] = json.loads(process.environ["TF_CONFIG"])

    def wait_for(self, text: str, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while text not in self.output():
            self.record()
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"launcher never printed {text!r}:\n{self.output()[-4000:]}")
            time.sleep(0.3)
        self.record()

    def wait(self, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        while self.process.poll() is None and time.monotonic() < deadline:
            self.record()
            time.sleep(0.5)
        return self.process.wait(timeout=1)

    def cleanup(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.hosts.kill_strays()


def leftovers(hosts, seconds: float = 30) -> dict[str, list[str]]:
    """What still runs in each host besides its sshd, after waiting up to `seconds` for it to end."""
    deadline = time.monotonic() + seconds
    while True:
        left = {name: [f"{p.pid} {' '.join(p.argv)[:120]}" for p in host.processes() if p.pid != host.sshd.pid]
                for name, host in hosts.hosts.items()}
        if not any(left.values()) or time.monotonic() > deadline:
            return {name: found for name, found in left.items() if found}
        time.sleep(0.3)


def remote_pids(output: str) -> dict[str, tuple[str, int]]:
    """label -> (host, pid) from the wrappers' `<label> runs on <host> as pid <pid>` lines."""
    found = re.findall(r"^\[[^\]]+\] dslrun launch: (\S+) runs on (\S+) as pid (\d+)$", output, re.MULTILINE)
    return {label: (host, int(pid)) for label, host, pid in found}


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_data(tmp_path_factory.mktemp("tiny") / "data", num_train=96, num_val=32, image_size=16)


def tiny_pipeline(tmp_path: Path, data: Path, epochs: int) -> Path:
    path = tmp_path / "tiny_ps_hosts.yaml"
    path.write_text(TINY.format(data=data, run=tmp_path / "run", epochs=epochs))
    return path


# ------------------------------------------------------------------------------ clusters
@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.multihost
def test_shipped_cifar10_ps_trains_across_two_hosts(test_hosts, tmp_path: Path) -> None:  # noqa: F811
    data = tmp_path / "data"
    dslrun("data", "synthetic", "--out", str(data), "--num-train", "256", "--num-val", "64", "--num-classes", "4",
           "--image-size", "32")
    run = tmp_path / "run"
    launcher = HostLauncher(
        test_hosts, tmp_path, "--backend", "ps", "--workers", "2", "--ps", "1", str(REPO / "pipelines" / "cifar10_ps.yaml"),
        "--set", f"inputter.train={data}/train.csv", "--set", f"inputter.val={data}/eval.csv",
        "--set", "runner.max_epochs=1", "--set", "inputter.batch_size=16", "--set", f"runner.model_dir={run}",
        "--set", "network.depth=20")
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        code = launcher.wait(400)
        out = launcher.output()
        assert code == 0, out[-4000:]
        assert "dslrun launch: chief=hosta worker:0=hostb worker:1=hosta ps:0=hostb" in out, out[:2000]
        assert {label: host for label, (host, _) in remote_pids(out).items()} == {
            "chief": "hosta", "worker:0": "hostb", "worker:1": "hosta", "ps:0": "hostb"}, out[:3000]
        # The processes themselves, seen inside each host, with the cluster spread over both addresses
        # (a set: a task's short-lived fork children, before their exec, look like the task).
        roles = {name: sorted({f"{c['task']['type']}:{c['task']['index']}" for c in seen.values()})
                 for name, seen in launcher.seen.items()}
        assert roles == {"hosta": ["chief:0", "worker:1"], "hostb": ["ps:0", "worker:0"]}, roles
        cluster = next(iter(launcher.seen["hosta"].values()))["cluster"]
        addresses = {test_hosts.hosts["hosta"].address, test_hosts.hosts["hostb"].address}
        assert {spec.rsplit(":", 1)[0] for specs in cluster.values() for spec in specs} == addresses, cluster
        assert "/job:ps/replica:0/task:0" in next(line for line in out.splitlines() if "model variables" in line)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in records if r["mode"] == "train"] == [1]
        assert json.loads((run / "DONE").read_text())["step"] == 16  # 256 images / batch 16
        assert leftovers(test_hosts) == {}
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.multihost
def test_sigkill_to_the_launcher_leaves_nothing_on_any_host(test_hosts, tmp_path: Path, tiny_data: Path) -> None:  # noqa: F811
    """Killing the launcher kills its ssh clients (PR_SET_PDEATHSIG); each remote wrapper sees its
    connection close and stops its task: SIGTERM, then SIGKILL after --grace-seconds."""
    launcher = HostLauncher(test_hosts, tmp_path, "--grace-seconds", "5", str(tiny_pipeline(tmp_path, tiny_data, 500)))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        assert all(len({json.dumps(c) for c in seen.values()}) == 2 for seen in launcher.seen.values()), launcher.seen
        launcher.process.kill()  # the launcher alone: its ssh clients are in sessions of their own
        launcher.process.wait(timeout=10)
        assert leftovers(test_hosts, seconds=30) == {}
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.multihost
def test_a_dead_remote_worker_stops_the_whole_cluster(test_hosts, tmp_path: Path, tiny_data: Path) -> None:  # noqa: F811
    launcher = HostLauncher(test_hosts, tmp_path, "--grace-seconds", "5", str(tiny_pipeline(tmp_path, tiny_data, 500)))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        host, pid = remote_pids(launcher.output())["worker:0"]
        assert host == "hostb" and pid in launcher.seen["hostb"]
        os.kill(pid, signal.SIGKILL)  # the hosts share the machine's pid namespace
        code = launcher.wait(60)
        out = launcher.output()
        assert code != 0
        assert "task worker:0 exited with status 137 before the chief finished" in out, out[-3000:]
        assert leftovers(test_hosts, seconds=30) == {}
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.multihost
def test_sigterm_to_the_launcher_lets_the_remote_chief_save(test_hosts, tmp_path: Path, tiny_data: Path) -> None:  # noqa: F811
    launcher = HostLauncher(test_hosts, tmp_path, "--grace-seconds", "20", str(tiny_pipeline(tmp_path, tiny_data, 500)))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        time.sleep(2)  # into the training loop
        launcher.process.send_signal(signal.SIGTERM)
        code = launcher.wait(60)
        out = launcher.output()
        assert code == 128 + signal.SIGTERM, out[-4000:]
        assert "[chief] dslrun: interrupted by SIGTERM: saved a checkpoint" in out, out[-4000:]
        assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.index"))
        assert leftovers(test_hosts) == {}
    finally:
        launcher.cleanup()


# -------------------------------------------------------------------------- bad input
@pytest.mark.multihost
def test_unreachable_or_half_installed_hosts_stop_the_launch_before_any_task(test_hosts, tmp_path: Path,  # noqa: F811
                                                                             tiny_data: Path) -> None:
    pipeline = tiny_pipeline(tmp_path, tiny_data, 1)
    with test_hosts.hosts["hostb"] as hostb:
        hostb.hide(Path(sys.executable).parent)
        result = subprocess.run(test_hosts.command([*DSLRUN, "launch", "--hosts", "hosta,hostb,nosuchhost.invalid",
                                                    str(pipeline)]), capture_output=True, text=True,
                                env=test_hosts.env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("dslrun launch: nosuchhost.invalid: reachable: unreachable over ssh: ")
               for line in lines), lines
    assert any(line.startswith(f"dslrun launch: hostb: versions: {sys.executable} cannot run there") for line in lines)
    assert not [line for line in lines if line.startswith("dslrun launch: hosta:")], lines
    assert lines[-1].startswith("dslrun launch: nothing was started; check the hosts with `dslrun doctor --hosts")
    assert leftovers(test_hosts, seconds=5) == {}


@pytest.mark.parametrize(("args", "message"), [
    (["--hosts", "hosta"], "names one host"),
    (["--hosts", "hosta:2,hostb:2"], "slot counts (host:N) are horovodrun's"),
    (["--env", "CIFAR10_DIR"], "--env only make sense with --hosts"),
    (["--ssh-port", "2222"], "--ssh-port only make sense with --hosts"),
])
def test_bad_host_options_are_refused(args: list[str], message: str) -> None:
    result = dslrun("launch", *args, "pipelines/cifar10_ps.yaml", check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_pipeline_that_does_not_validate_is_refused_before_any_ssh(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrunner:\n  max_epochs: -1\n")
    result = subprocess.run([*DSLRUN, "launch", "--hosts", "nosuch-a.invalid,nosuch-b.invalid", str(bad)],
                            capture_output=True, text=True, env=ENV, timeout=60)
    assert result.returncode == 1 and f"{bad}:3:" in result.stderr, result.stderr
    assert "ssh" not in result.stderr and "Traceback" not in result.stderr


# -------------------------------------------------------------------------------- units
def test_placement_deals_tasks_round_robin_with_the_chief_first() -> None:
    placement = place(task_roles(workers=3, num_ps=2, evaluator=True), ["a", "b"])
    assert placement[("chief", 0)] == "a"
    assert [placement[("worker", i)] for i in range(3)] == ["b", "a", "b"]
    assert [placement[("ps", i)] for i in range(2)] == ["a", "b"] and placement[("evaluator", 0)] == "a"
    assert Counter(placement.values()) == {"a": 4, "b": 3}
    assert host_port("10.0.0.2", 7) == "10.0.0.2:7" and host_port("fd00::2", 7) == "[fd00::2]:7"


def test_tasks_get_the_variables_the_pipeline_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("inputter:\n  train: ${DATA_ROOT}/train.csv\n  val: ${UNSET_HERE:-x}\n")
    monkeypatch.setenv("DATA_ROOT", "/shared/data")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    monkeypatch.setenv("OTHER", "o")
    monkeypatch.delenv("UNSET_HERE", raising=False)
    assert forwarded_env([str(pipeline)], ["OTHER", "EXTRA=1"]) == {
        "TF_CPP_MIN_LOG_LEVEL": "3", "DATA_ROOT": "/shared/data", "OTHER": "o", "EXTRA": "1"}
