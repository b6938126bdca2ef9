"""What a distributed job exposes on the network, measured across two real hosts (issue 29).

Every host gets a second network the job does not use (TestHosts.add_outside_network), with
`outsider`, a namespace on that network alone: the campus or public side of a multi-homed
cluster node. While a launcher runs a pipeline across hosta and hostb, the test lists every
listening socket of the job (in both hosts, and on the login node the launcher's own) and
checks, for each port:

- a server bound to the job's interface is refused to the outsider (at the host's outside
  address) and reached by the other host of the job;
- a server the library binds to every interface (Horovod's services, TensorFlow's gRPC
  servers) is reachable from the outsider, exactly the ones docs/multihost.md lists as
  such; with the firewall rules docs/multihost.md gives (read from its `nft` block and
  applied in each host), the outsider reaches none of the job's ports and the job goes on
  training.

Set DSLRUN_EXPOSURE_ALL=1 to measure every launcher (horovodrun --mpi, mpirun, the
collective cluster too); by default one Horovod launcher and one TF_CONFIG cluster run,
which together hold every kind of server. With `-s`, each test prints the sockets it saw:
the table in docs/multihost.md was written from that output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testhosts import OutsideNetwork, TestHosts, test_hosts  # noqa: F401 (the session fixture)

from e2e_support import DSLRUN, checkpoint_steps, descendants, kill_group, synthetic_data

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.multihost]

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "multihost.md"
SMALL = ["network={type: simple_cnn, filters: [8], dense_units: 16, batch_norm: true}"]
ALL = os.environ.get("DSLRUN_EXPOSURE_ALL") == "1"
LAUNCHERS = ["horovodrun-gloo", "launch-ps", *(["horovodrun-mpi", "mpirun", "launch-collective"] if ALL else [])]
EVERY_INTERFACE = ("0.0.0.0", "*", "[::]", "::", "[::ffff:0.0.0.0]")
PROBE = ("import json, socket, sys\n"
         "out = {}\n"
         "for addr, port in json.loads(sys.argv[1]):\n"
         "    try:\n"
         "        socket.create_connection((addr, port), timeout=3).close(); out[f'{addr}:{port}'] = 'open'\n"
         "    except OSError as exc:\n"
         "        out[f'{addr}:{port}'] = type(exc).__name__\n"
         "print(json.dumps(out))\n")


@dataclass(frozen=True)
class Listening:
    """One listening socket: where (host or `login`), protocol, address, port, and its process."""

    where: str
    proto: str
    address: str
    port: int
    process: str

    @property
    def every_interface(self) -> bool:
        return self.address in EVERY_INTERFACE

    @property
    def loopback(self) -> bool:
        return self.address.startswith("127.") or self.address in ("[::1]", "::1")


@pytest.fixture(scope="module")
def outside(test_hosts: TestHosts) -> OutsideNetwork:  # noqa: F811
    return test_hosts.add_outside_network()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_data(tmp_path_factory.mktemp("exposure") / "synthetic", 128, 32, 16)


def _sets(settings: list[str]) -> list[str]:
    return [arg for setting in settings for arg in ("--set", setting)]


def launcher_argv(launcher: str, hosts: TestHosts, data: Path, run: Path) -> list[str]:
    """The launcher's command line: a shipped pipeline, made tiny, long enough to be measured while it trains."""
    common = [f"inputter.train={data}/train.csv", f"inputter.val={data}/eval.csv", "inputter.num_classes=4",
              "inputter.batch_size=8", "inputter.image_shape=[16, 16, 3]", "runner.max_epochs=5000",
              f"runner.model_dir={run}", *SMALL]
    if launcher.startswith("horovodrun"):
        controller = launcher.split("-")[1]
        # Under --mpi, Open MPI's ofi transport (libfabric) listened on the address of the hosts' *other*
        # interface; libfabric's shm provider alone removes that listener (docs/multihost.md).
        fabric = ["--mpi-args=-x FI_PROVIDER=shm"] if controller == "mpi" else []
        return ["horovodrun", "-np", "2", "-H", "hosta:1,hostb:1", f"--{controller}", *hosts.horovodrun_args(), *fabric,
                "dslrun", str(REPO / "pipelines" / "quickstart.yaml"), *_sets(common)]
    if launcher == "mpirun":
        return ["mpirun", "-np", "2", "--host", "hosta:1,hostb:1", "--allow-run-as-root", *hosts.mpirun_args(),
                "-x", "PATH", "-x", "PYTHONUNBUFFERED=1", "-x", "TF_CPP_MIN_LOG_LEVEL=3",
                "dslrun", str(REPO / "pipelines" / "quickstart.yaml"), *_sets(common)]
    backend = launcher.split("-")[1]
    cluster = ["--workers", "1", "--ps", "1", "--evaluator"] if backend == "ps" else ["--workers", "2"]
    pipeline = "cifar10_ps.yaml" if backend == "ps" else "quickstart.yaml"
    settings = common + ([] if backend == "ps" else ["runner.backend=collective"])
    return [*DSLRUN, "launch", "--backend", backend, *cluster, "--hosts", "hosta,hostb",
            "--network-interfaces", hosts.interface, str(REPO / "pipelines" / pipeline), *_sets(settings),
            "--set", "runner.workflow=[[train, 1], [val, 1]]"]


def listening(hosts: TestHosts, launcher_pid: int) -> set[Listening]:
    """Every listening TCP/UDP socket of the job: all of each host's but its sshd's, and the launcher's here."""
    found: set[Listening] = set()
    for name, host in hosts.hosts.items():
        result = host.run(["ss", "-Hltunp"], timeout=30)
        found |= {s for s in _parse_ss(name, result.stdout) if "sshd" not in s.process}
    mine = {launcher_pid, *descendants(launcher_pid)}
    result = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, timeout=30)
    found |= set(_parse_ss("login", result.stdout, mine))
    return found


def _parse_ss(where: str, text: str, pids: set[int] | None = None) -> Iterator[Listening]:
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7:
            continue
        address, _, port = fields[4].rpartition(":")
        owners = [int(pid) for pid in re.findall(r"pid=(\d+)", fields[6])]
        if pids is not None and not set(owners) & pids:
            continue
        yield Listening(where, fields[0], address.split("%")[0], int(port), _describe(owners))


def _describe(pids: list[int]) -> str:
    """The owning process, as `[its rank or task] name argv...` (shortened), for the table."""
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            environ = dict(pair.split("=", 1) for pair in Path(f"/proc/{pid}/environ").read_bytes()
                           .decode(errors="replace").split("\0") if "=" in pair)
        except OSError:
            continue
        role = environ.get("HOROVOD_RANK", environ.get("OMPI_COMM_WORLD_RANK"))
        with contextlib.suppress(ValueError, KeyError, TypeError):
            task = json.loads(environ["TF_CONFIG"])["task"]
            role = f"{task['type']}:{task.get('index', 0)}"
        text = " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))[:120]
        return f"[{role}] {text}" if role is not None else text
    return "?"


def probe(command: list[str], targets: list[tuple[str, int]]) -> dict[str, str]:
    """address:port -> 'open' or the connect error, tried from inside `command`'s namespace."""
    result = subprocess.run([*command, sys.executable, "-c", PROBE, json.dumps(targets)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


class Sampler:
    """Lists the job's listening sockets every 0.3 s from its start, for servers that live only during
    start-up (Gloo's listener), and has the outsider try each new one in the hosts at once."""

    def __init__(self, hosts: TestHosts, outside: OutsideNetwork, launcher_pid: int) -> None:
        self.seen: set[Listening] = set()
        self.outsider: dict[Listening, str] = {}  # what the outsider got, at the host's outside address
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(hosts, outside, launcher_pid), daemon=True)
        self._thread.start()

    def _run(self, hosts: TestHosts, outside: OutsideNetwork, launcher_pid: int) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(subprocess.SubprocessError, OSError, AssertionError, ValueError):
                found = listening(hosts, launcher_pid)
                new = [s for s in found - self.seen if s.where != "login" and s.proto == "tcp" and not s.loopback]
                self.seen |= found
                if new:
                    reached = probe(outside.outsider_command([]), [(outside.addresses[s.where], s.port) for s in new])
                    self.outsider.update({s: reached[f"{outside.addresses[s.where]}:{s.port}"] for s in new})
            self._stop.wait(0.3)

    def stop(self) -> set[Listening]:
        self._stop.set()
        self._thread.join(timeout=60)
        return set(self.seen)


def firewall_rules(interface: str, subnet: str) -> str:
    """The nft ruleset docs/multihost.md tells a cluster to load on every host, for this job's network."""
    block = re.search(r"```nft\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert block, f"{DOC} has no ```nft block"
    return block.group(1).replace("JOB_INTERFACE", interface).replace("JOB_SUBNET", subnet)


def wait_training(process: subprocess.Popen, log: Path, run: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not list((run / "checkpoints").glob("ckpt-*.index")):
        assert process.poll() is None, f"the job ended before its first checkpoint:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no checkpoint within {timeout:.0f} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_host_off_the_job_network_reaches_no_port_the_job_binds(test_hosts: TestHosts,  # noqa: F811
                                                                    outside: OutsideNetwork, data: Path,
                                                                    tmp_path: Path, launcher: str) -> None:
    if shutil.which("nft") is None:
        pytest.skip("the firewall half of the test needs nft: apt-get install nftables")
    run, log = tmp_path / "run", tmp_path / "launcher.log"
    hosta, hostb = test_hosts.hosts["hosta"], test_hosts.hosts["hostb"]
    with open(log, "w") as handle:
        process = test_hosts.popen(launcher_argv(launcher, test_hosts, data, run), stdout=handle,
                                   stderr=subprocess.STDOUT, env={**test_hosts.env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    sampler = Sampler(test_hosts, outside, process.pid)
    try:
        wait_training(process, log, run)
        now = {s for s in listening(test_hosts, process.pid) if s.where != "login" and s.proto == "tcp"}
        time.sleep(1)
        now |= {s for s in listening(test_hosts, process.pid) if s.where != "login" and s.proto == "tcp"}
        seen = sampler.stop() | now
        print(f"\n{launcher}: listening sockets of the job (* = still listening while it trains)")
        for s in sorted(seen, key=lambda s: (s.where, s.port)):
            print(f"  {'*' if s in now else ' '} {s.where:6} {s.proto} {s.address}:{s.port}  {s.process}")
        for s in seen:  # bound to the job's address, or to every interface: never to the outside one
            if s.where != "login" and not s.loopback:
                assert s.every_interface or s.address == test_hosts.hosts[s.where].address, s
        early = {s: v for s, v in sampler.outsider.items() if s not in now}
        print(f"  outsider, at the hosts' outside addresses, while they listened: {early}")
        assert all((v == "open") == s.every_interface for s, v in early.items()), early
        in_hosts = [s for s in now if not s.loopback]
        # The outsider, at each host's outside address: only servers bound to every interface answer.
        targets = [(outside.addresses[s.where], s.port) for s in in_hosts]
        reached = probe(outside.outsider_command([]), targets)
        exposed = {s for s in in_hosts if reached[f"{outside.addresses[s.where]}:{s.port}"] == "open"}
        assert exposed == {s for s in in_hosts if s.every_interface}, reached
        # The job's own hosts reach every server at its job address (hostb probes hosta's, hosta hostb's).
        for here, there in ((hostb, "hosta"), (hosta, "hostb")):
            mine = [(test_hosts.hosts[there].address, s.port) for s in in_hosts if s.where == there]
            assert all(v == "open" for v in probe(here.command([]), mine).values()), (there, mine)

        # With the documented firewall on every host, the outsider reaches nothing, and the job trains on.
        rules = firewall_rules(test_hosts.interface, test_hosts.subnet)
        for host in (hosta, hostb):
            loaded = host.run(["nft", "-f", "-"], input=rules, timeout=30)
            assert loaded.returncode == 0, loaded.stderr
        try:
            reached = probe(outside.outsider_command([]), targets)
            assert not [t for t, v in reached.items() if v == "open"], reached
            before = max(checkpoint_steps(run), default=0)
            deadline = time.monotonic() + 240
            while max(checkpoint_steps(run), default=0) <= before:
                assert process.poll() is None, f"the job ended behind the firewall:\n{log.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"no new checkpoint behind the firewall:\n{log.read_text()[-4000:]}"
                time.sleep(0.5)
        finally:
            for host in (hosta, hostb):
                host.run(["nft", "delete", "table", "inet", "dslrun_job"], timeout=30)
    finally:
        sampler.stop()
        kill_group(process)
        test_hosts.kill_strays()
