"""Real test hosts on one machine: network namespaces, each with its own sshd.

The session fixture `test_hosts` builds `hosta` and `hostb`. Each is a network namespace
joined by a veth pair to a bridge in the root namespace, with one address in a private
/24 (the root namespace holds `.1` on the bridge: it is the "login node" where horovodrun,
mpirun and dslrun are started). In each namespace a real sshd (Debian's openssh-server)
listens on the host's address, running in its own mount and UTS namespaces, so the host
has its own hostname and a test can make one host's file system differ (`hide`, `bind`).
The file system is otherwise shared, standing in for the shared storage of a cluster.

Choices, and why:

- **Names resolve through a private hosts file, never the machine's /etc/hosts.** The
  file (the machine's /etc/hosts plus this session's `hosta`/`hostb` lines) is
  bind-mounted over /etc/hosts inside each host's mount namespace, and launchers on the
  login node run through `TestHosts.command` / `popen`, which do the same in a private
  mount namespace. Editing the shared /etc/hosts would make two pytest sessions (two
  engineers on one machine) fight over `hosta`, and a crashed run would leave lines
  behind; a bind mount disappears with its namespace. The ssh_config has no `HostName`
  lines, so that ssh names the host in its messages ("Connection to hostb closed by
  remote host.") as it would on a cluster with DNS.
- **One interface name everywhere, unique per session** (`dsl<pid>`): the bridge in the
  root namespace and the veth end inside every host have the same name, because
  `horovodrun --network-interfaces NAME` looks the name up on the login node too
  (horovod.runner.util.network.get_driver_ip), and a fixed name like `dsl0` on the root
  namespace's bridge would collide between two sessions.
- **ssh never reads root's ~/.ssh.** A wrapper `ssh` (first on the PATH of `env`) runs
  `/usr/bin/ssh -F <session ssh_config>`: horovodrun and mpirun both call `ssh` by name
  and horovodrun overrides `plm_rsh_args` on mpirun's command line, so an environment
  variable alone would not reach every ssh. Host keys are pre-listed in the session's
  known_hosts.
- **Leftovers of crashed runs are removed by prefix.** Every session keeps a state file,
  locked while it lives, under /run/dslrun-testhosts; a later session removes the
  namespaces, links, processes and temp dirs of every unlocked one, and of any `dsl<pid>`
  namespace or link whose session is gone.

Needs root, iproute2, util-linux (unshare, nsenter) and openssh-server; otherwise the tests
that use the fixture are skipped with the reason.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HOST_NAMES = ("hosta", "hostb")
STATE_DIR = Path("/run/dslrun-testhosts")
SUBNET_PREFIX = "10.213"  # sessions take 10.213.N.0/24, the first N unused on this machine
OUTSIDE_PREFIX = "10.214"  # add_outside_network's network (inside the hosts only)
SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
_NAME = re.compile(r"^dsl(\d+)")


class Unavailable(Exception):
    """This machine cannot build test hosts; the message is the skip reason."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ip ARGS`; a failure raises with ip's own message."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`tc ARGS`; a failure raises with tc's own message."""
    result = subprocess.run(["tc", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {result.stderr.strip()}")
    return result


_RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}


def rate_bits(rate: str) -> float:
    """tc's rate words in bit/s: "2.5gbit" -> 2.5e9."""
    for unit, scale in _RATE_UNITS.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"rate {rate!r}: expected a number and kbit, mbit or gbit, e.g. 2.5gbit")


def _default_burst(rate: str) -> str:
    return f"{max(128 * 1024, int(rate_bits(rate) / 8 / 1000))}b"


def _netns_inode(netns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return None


def pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is the one with this inode."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _kill_netns_processes(inode: int | None, spare: int | None = None, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process in the namespace (but `spare`) until none is left; their pids.

    Repeated because a process can fork between the listing and the kill.
    """
    killed: list[int] = []
    if inode is None:
        return killed
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [pid for pid in pids_in_netns(inode) if pid != spare and pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed.extend(pid for pid in pids if pid not in killed)
        time.sleep(0.05)
    return killed


@dataclass
class Process:
    """A process seen in a host: its pid, argv and environment (read from /proc)."""

    pid: int
    argv: list[str]
    environ: dict[str, str]


class Mount:
    """One mount made in a host's mount namespace; a context manager that undoes it."""

    def __init__(self, host: Host, target: str) -> None:
        self.host = host
        self.target = target

    def undo(self) -> None:
        if self in self.host.mounts:
            self.host.mounts.remove(self)
            self.host.nsenter_mount(["umount", "--lazy", self.target])

    def __enter__(self) -> Mount:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


@dataclass
class Host:
    """A test host: a network namespace whose sshd runs in its own mount and UTS namespaces."""

    name: str
    address: str
    netns: str
    veth: str
    workdir: Path
    sshd: subprocess.Popen | None = None
    mounts: list[Mount] = field(default_factory=list)
    interface: str = ""  # its end of the veth, named as the session's interface

    @property
    def inode(self) -> int | None:
        return _netns_inode(self.netns)

    # --- its file system -------------------------------------------------------------
    def hide(self, path: str | os.PathLike) -> Mount:
        """Mount an empty tmpfs over the directory `path`, on this host only.

        The mount lives in the sshd's mount namespace, so every session opened after (and
        before) it sees the empty directory; the login node and other hosts do not.
        """
        target = str(path)
        self.nsenter_mount(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "dslrun-hidden", target])
        return self._remember(target)

    def bind(self, src: str | os.PathLike, dst: str | os.PathLike) -> Mount:
        """Bind-mount `src` over `dst` on this host only (a file over a file, a dir over a dir)."""
        self.nsenter_mount(["mount", "--bind", str(src), str(dst)])
        return self._remember(str(dst))

    def undo(self) -> None:
        """Undo every hide/bind of this host, newest first."""
        for mount in reversed(list(self.mounts)):
            mount.undo()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def _remember(self, target: str) -> Mount:
        mount = Mount(self, target)
        self.mounts.append(mount)
        return mount

    def nsenter_mount(self, argv: Sequence[str]) -> None:
        """Run a mount command in the sshd's mount namespace; fail loudly."""
        pid = self._sshd_pid()
        result = subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", *argv],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)}: {result.stderr.strip()}")

    # --- its processes ---------------------------------------------------------------
    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` made to run inside this host: its network, mount and UTS namespaces.

        The working directory is kept (entering a mount namespace would reset it to /).
        """
        return ["nsenter", f"--target={self._sshd_pid()}", "--net", "--mount", "--uts", f"--wd={os.getcwd()}",
                "--", *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run `argv` inside this host and wait (subprocess.run keyword arguments pass through)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), **kwargs)

    def pids(self) -> list[int]:
        """Every process in this host (its sshd included)."""
        inode = self.inode
        return pids_in_netns(inode) if inode is not None else []

    def processes(self) -> list[Process]:
        """Every process in this host with its argv and environment (those that can be read)."""
        found = []
        for pid in self.pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
                pairs = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            environ = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
            found.append(Process(pid, argv, environ))
        return found

    def kill(self, sshd_too: bool = True) -> list[int]:
        """SIGKILL every process of this host, or all but its sshd; the pids killed.

        With `sshd_too` the host is gone as if it lost power: nothing answers on its address
        until `start_sshd`. Mounts made with hide/bind are lost with the sshd.
        """
        spare = None if sshd_too or self.sshd is None else self.sshd.pid
        killed = _kill_netns_processes(self.inode, spare=spare)
        if sshd_too and self.sshd is not None:
            self.sshd.wait()
            self.sshd = None
            self.mounts.clear()
        return killed

    def start_sshd(self, hosts_file: Path, timeout: float = 10.0) -> None:
        """Start this host's sshd (in new mount and UTS namespaces) and wait until it listens."""
        if self.sshd is not None and self.sshd.poll() is None:
            return
        config = self.workdir / f"{self.name}.sshd_config"
        log = self.workdir / f"{self.name}.sshd.log"
        script = 'hostname "$1" && mount --bind "$2" /etc/hosts && exec "$3" -D -f "$4" -E "$5"'
        self.sshd = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--propagation", "private", "--",
             "sh", "-c", script, "sh", self.name, str(hosts_file), SSHD, str(config), str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # Ctrl-C in the terminal reaches pytest, not the hosts
        self._wait_listening(log, timeout)

    def _wait_listening(self, log: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.sshd is not None
            if self.sshd.poll() is not None:
                raise RuntimeError(f"{self.name}: sshd exited {self.sshd.returncode}: "
                                   f"{self.sshd.stderr.read() if self.sshd.stderr else ''}{_tail(log)}")
            with contextlib.suppress(OSError), socket.create_connection((self.address, 22), timeout=1):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: sshd did not listen on {self.address}:22 within {timeout:.0f} s{_tail(log)}")

    # --- its link ---------------------------------------------------------------------
    def shape(self, rate: str | None, burst: str | None = None) -> None:
        """Limit this host's link to `rate` (tc's token bucket, e.g. "1gbit") both ways; None lifts it.

        The qdisc sits on the host's end of its veth (what it sends) and on the bridge's end
        (what it receives), as a full-duplex NIC of that rate would. `burst` defaults to a
        millisecond at the rate, at least 128 KiB (a veth hands tbf 64 KiB GSO packets).
        Removed with the host's link, so teardown needs nothing more. Needs tc (iproute2).
        """
        if shutil.which("tc") is None:
            raise Unavailable("shaping a test host's link needs `tc`: apt-get install iproute2")
        ends = (["-n", self.netns, "qdisc"], self.interface), (["qdisc"], self.veth)
        for prefix, device in ends:
            if rate is None:
                _tc(*prefix, "del", "dev", device, "root", check=False)
            else:
                _tc(*prefix, "replace", "dev", device, "root", "tbf", "rate", rate,
                    "burst", burst or _default_burst(rate), "latency", "100ms")

    def _sshd_pid(self) -> int:
        if self.sshd is None or self.sshd.poll() is not None:
            raise RuntimeError(f"{self.name} is down (its sshd is not running); start_sshd() brings it back")
        return self.sshd.pid


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n" + "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return ""


_sessions = [0]


def _next_tag() -> str:
    """`dsl<pid>`, then `dsl<pid>s1`, ...: unique on this machine, and short enough for interface names."""
    count, _sessions[0] = _sessions[0], _sessions[0] + 1
    return f"dsl{os.getpid()}" + (f"s{count}" if count else "")


@dataclass
class OutsideNetwork:
    """A network on every host that the job does not use, and `outsider`, a namespace on it alone."""

    subnet: str
    interface: str  # its name inside every host
    addresses: dict[str, str]  # host name -> the host's address on this network
    outsider_netns: str
    outsider_address: str

    def outsider_command(self, argv: Sequence[str]) -> list[str]:
        """`argv` made to run in the outsider's network namespace."""
        return ["ip", "netns", "exec", self.outsider_netns, *argv]


class TestHosts:
    """The hosts of one session, the login node's side of them, and their teardown.

    Attributes a test uses:
        hosts: name -> Host.
        interface: the interface name on every host and on the login node (`dsl<pid>`).
        login_address: the login node's address on the bridge.
        subnet: the hosts' network, e.g. "10.213.0.0/24".
        ssh_config, identity_file, known_hosts: the session's ssh files.
        env: the environment for launchers (the ssh wrapper and the venv first on PATH,
            OpenMPI allowed to run as root and told to yield the shared cores).

    Methods: command/popen (a launcher on the login node), ssh, run (a command inside a
    host), kill_host/revive (a host lost and back), kill_strays, horovodrun_args and
    mpirun_args; Host.hide/bind/undo make one host's file system differ; Host.shape limits
    its link's rate (tc's token bucket, for bench/scaling.py); add_outside_network
    gives every host a second network with a third namespace, `outsider`, on it alone.
    """

    __test__ = False  # a class named Test* that pytest must not collect

    def __init__(self, names: Sequence[str] = HOST_NAMES) -> None:
        self.tag = _next_tag()
        self.interface = self.tag
        self.bridge = self.tag
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-hosts-"))
        self.names = list(names)
        self.hosts: dict[str, Host] = {}
        self.subnet = ""
        self.login_address = ""
        self._state: Any = None
        self._extra: dict[str, list[str]] = {"netns": [], "links": []}  # add_outside_network's
        self.outside: OutsideNetwork | None = None
        self.closing = False  # teardown has begun
        self._closed = False  # and ended

    # --- what launchers need ------------------------------------------------------------
    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def identity_file(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def hosts_file(self) -> Path:
        return self.workdir / "hosts"

    @property
    def env(self) -> dict[str, str]:
        """Environment for horovodrun, mpirun and ssh started on the login node.

        The hosts share this machine's cores, so ranks on both oversubscribe them; OpenMPI,
        which counts only a host's slots, would busy-poll and starve the ranks still
        working (measured: the first train call of 4 ranks on 2 cores took 68 s instead of
        29 s), so it is told to yield.
        """
        venv_bin = Path(sys.executable).parent
        return {
            **os.environ,
            "PATH": os.pathsep.join([str(self.workdir / "bin"), str(venv_bin), os.environ.get("PATH", "")]),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_mpi_yield_when_idle": "1",
        }

    def horovodrun_args(self) -> list[str]:
        """horovodrun's own ssh and network flags for these hosts."""
        return ["--ssh-identity-file", str(self.identity_file), "--ssh-port", "22",
                "--network-interfaces", self.interface]

    def mpirun_args(self) -> list[str]:
        """Plain mpirun's flags: ssh through the session config, TCP on the hosts' interface only."""
        return ["--mca", "plm_rsh_agent", SSH, "--mca", "plm_rsh_args", f"-F {self.ssh_config}",
                "--mca", "btl_tcp_if_include", self.interface, "--mca", "oob_tcp_if_include", self.interface]

    def ssh(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """`ssh HOST ARGV` from the login node with the session's ssh files."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command([SSH, "-F", str(self.ssh_config), host, *argv]), **kwargs)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` made to run on the login node with the hosts' names resolving."""
        return ["unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.hosts_file), *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start a launcher on the login node, in its own process group (kill it with killpg)."""
        kwargs.setdefault("env", self.env)
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run `argv` inside `host` (its network, mount and UTS namespaces)."""
        return self.hosts[host].run(argv, **kwargs)

    def kill_host(self, name: str, sshd_too: bool = True) -> list[int]:
        """SIGKILL every process of the host (or all but its sshd); see Host.kill."""
        return self.hosts[name].kill(sshd_too=sshd_too)

    def revive(self, name: str) -> None:
        """Bring a killed host back: start its sshd again."""
        self.hosts[name].start_sshd(self.hosts_file)

    def kill_strays(self) -> None:
        """Kill every process in every host but the sshds: what a test leaves must not outlive it."""
        for host in self.hosts.values():
            if host.sshd is not None:
                host.kill(sshd_too=False)

    # --- building ---------------------------------------------------------------------
    def start(self) -> TestHosts:
        """Build the network and start the sshds; raises Unavailable when this machine cannot."""
        _check_tools()
        STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _global_lock():
            remove_leftovers()
            self._claim_state()
            self._allocate_subnet()
            self._write_state()
            self._build_network()
        self._write_ssh_files()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        for host in self.hosts.values():
            host.start_sshd(self.hosts_file)
        self._check_ssh()
        return self

    def _claim_state(self) -> None:
        """Open and lock this session's state file: while it is locked, nobody removes our things."""
        self._state = open(STATE_DIR / f"{self.tag}.json", "w")  # noqa: SIM115 (held for the session)
        fcntl.flock(self._state, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _session_state(self) -> dict[str, Any]:
        """Everything this session creates outside its process, by name."""
        return {"netns": [*(f"{self.tag}-{name}" for name in self.names), *self._extra["netns"]],
                "links": [self.bridge, *(f"{self.tag}v{i}" for i in range(len(self.names))), *self._extra["links"]],
                "workdir": str(self.workdir)}

    def _write_state(self) -> None:
        self._state.seek(0)
        self._state.truncate()
        json.dump(self._session_state(), self._state)
        self._state.flush()

    def _allocate_subnet(self) -> None:
        base = _free_subnet_base()
        self.subnet = f"{base}.0/24"
        self.login_address = f"{base}.1"

    # --- a second network, which the job does not use ------------------------------------
    def add_outside_network(self) -> OutsideNetwork:
        """Give every host a second interface on a network of its own, with `outsider` on it too.

        It stands for the other network of a multi-homed cluster node (the campus or public
        side): the job runs over `interface`, and `outsider` is a machine that reaches the
        hosts only over this one. The login node is not on it. Once per session; removed
        with the session (its names are in the state file, and carry the session's prefix).
        """
        if self.outside is not None:
            return self.outside
        bridge, interface, netns = f"{self.tag}o", f"{self.tag}o", f"{self.tag}-outsider"
        veths = [f"{self.tag}o{i}" for i in range(len(self.names))]
        with _global_lock():
            base = _free_subnet_base(OUTSIDE_PREFIX)  # only inside the hosts: two sessions may share it
            self._extra["netns"].append(netns)
            self._extra["links"] += [bridge, *veths, f"{self.tag}ox"]
            self._write_state()
            _ip("link", "add", bridge, "type", "bridge")  # no address: the login node is not on it
            _ip("link", "set", bridge, "up")
            addresses = {}
            for i, (name, veth) in enumerate(zip(self.names, veths, strict=True)):
                host = self.hosts[name]
                addresses[name] = f"{base}.{i + 2}"
                _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p", "netns", host.netns)
                _ip("-n", host.netns, "link", "set", f"{veth}p", "name", interface)
                _ip("link", "set", veth, "master", bridge, "up")
                _ip("-n", host.netns, "addr", "add", f"{addresses[name]}/24", "dev", interface)
                _ip("-n", host.netns, "link", "set", interface, "up")
            _ip("netns", "add", netns)
            _ip("link", "add", f"{self.tag}ox", "type", "veth", "peer", "name", f"{self.tag}oxp", "netns", netns)
            _ip("link", "set", f"{self.tag}ox", "master", bridge, "up")
            _ip("-n", netns, "addr", "add", f"{base}.100/24", "dev", f"{self.tag}oxp")
            _ip("-n", netns, "link", "set", f"{self.tag}oxp", "up")
            _ip("-n", netns, "link", "set", "lo", "up")
        self.outside = OutsideNetwork(f"{base}.0/24", interface, addresses, netns, f"{base}.100")
        return self.outside

    def _build_network(self) -> None:
        base = self.login_address.rsplit(".", 1)[0]
        try:
            _ip("netns", "add", f"{self.tag}-{self.names[0]}")
        except RuntimeError as exc:
            raise Unavailable(f"cannot create a network namespace: {exc}") from exc
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.login_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            host = Host(name, f"{base}.{i + 2}", f"{self.tag}-{name}", f"{self.tag}v{i}", self.workdir,
                        interface=self.interface)
            self.hosts[name] = host
            self._build_host(host)

    def _build_host(self, host: Host) -> None:
        if host.inode is None:
            _ip("netns", "add", host.netns)
        inner = f"{host.veth}p"
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", inner, "netns", host.netns)
        _ip("-n", host.netns, "link", "set", inner, "name", self.interface)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", self.interface)
        _ip("-n", host.netns, "link", "set", self.interface, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")

    def _write_ssh_files(self) -> None:
        """Host keys, a client key, authorized_keys, known_hosts, ssh_config, sshd configs, hosts file."""
        _keygen(self.identity_file)
        (self.workdir / "authorized_keys").write_text(self.identity_file.with_suffix(".pub").read_text())
        known = []
        for host in self.hosts.values():
            key = self.workdir / f"{host.name}_host_ed25519"
            _keygen(key)
            public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
            known.append(f"{host.name},{host.address} {public}\n")
            (self.workdir / f"{host.name}.sshd_config").write_text(_sshd_config(host, key, self.workdir))
        self.known_hosts.write_text("".join(known))
        self.ssh_config.write_text(self._ssh_config_text())
        wrapper = self.workdir / "bin" / "ssh"
        wrapper.parent.mkdir()
        wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F {self.ssh_config} "$@"\n')
        wrapper.chmod(0o755)
        lines = [f"{host.address}\t{host.name}\n" for host in self.hosts.values()]
        self.hosts_file.write_text(Path("/etc/hosts").read_text().rstrip("\n")
                                   + f"\n# dslrun test hosts, session {self.tag}\n" + "".join(lines))

    def _ssh_config_text(self) -> str:
        """No `HostName` lines: names resolve through the hosts file, so ssh's messages name the host."""
        return (
            "Host *\n"
            "  User root\n  Port 22\n"
            f"  IdentityFile {self.identity_file}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking no\n  CheckHostIP no\n  BatchMode yes\n  LogLevel ERROR\n"
            "  ConnectTimeout 10\n  ServerAliveInterval 5\n  ServerAliveCountMax 3\n"
        )

    def _check_ssh(self) -> None:
        """Every host reaches every other one's sshd, and the login node logs in to each."""
        for host in self.hosts.values():
            result = self.ssh(host.name, ["hostname"], timeout=30)
            if result.returncode != 0 or result.stdout.strip() != host.name:
                raise RuntimeError(f"ssh {host.name} hostname: exit {result.returncode}: {result.stdout}"
                                   f"{result.stderr}{_tail(self.workdir / f'{host.name}.sshd.log')}")
            for other in self.hosts.values():
                probe = host.run(["bash", "-c", f"exec 3<>/dev/tcp/{other.name}/22"], timeout=10)
                if probe.returncode != 0:
                    raise RuntimeError(f"{host.name} cannot reach {other.name}:22 over the bridge "
                                       f"(bridge netfilter?): {probe.stderr.strip()}")

    # --- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Remove every process, namespace, link and file of this session.

        Idempotent, and safe to call again after an interrupted call (atexit does).
        """
        if self._closed:
            return
        self.closing = True
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.kill(sshd_too=True)
        if self._state is not None:  # else the state file was another session's, and so are the names
            _remove_session(self._session_state())
            Path(self._state.name).unlink(missing_ok=True)
            self._state.close()
            self._state = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        self._closed = True


def _free_subnet_base(prefix: str = SUBNET_PREFIX) -> str:
    """`PREFIX.N`, the first N no address or route on this machine uses."""
    used = _ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout
    for n in range(256):
        if f"{prefix}.{n}." not in used:
            return f"{prefix}.{n}"
    raise Unavailable(f"no free /24 left in {prefix}.0.0/16 for test hosts")


def _check_tools() -> None:
    """Raise Unavailable with the reason when this machine cannot have test hosts."""
    if os.geteuid() != 0:
        raise Unavailable(f"test hosts need root to create network namespaces (running as uid {os.geteuid()})")
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
                          ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            raise Unavailable(f"test hosts need `{tool}`: apt-get install {package}")
    if not os.access(SSH, os.X_OK):
        raise Unavailable(f"test hosts need {SSH}: apt-get install openssh-client")
    if not os.access(SSHD, os.X_OK):
        raise Unavailable(f"test hosts need {SSHD}: apt-get install openssh-server")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, capture_output=True)


def _sshd_config(host: Host, host_key: Path, workdir: Path) -> str:
    """A root-only, key-only sshd on the host's address; StrictModes off because /tmp is world-writable.

    Its sessions get the test session's TMPDIR (tests/conftest.py): a sshd session starts from a clean
    environment, and the ranks a test kills on a host would leave their autograph modules in /tmp.
    """
    tmpdir = os.environ.get("TMPDIR", tempfile.gettempdir())
    return (
        f"ListenAddress {host.address}\nPort 22\nHostKey {host_key}\nPidFile none\nSetEnv TMPDIR={tmpdir}\n"
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\nStrictModes no\nPrintMotd no\nPrintLastLog no\n"
        "X11Forwarding no\nMaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n"
    )


@contextlib.contextmanager
def _global_lock() -> Iterator[None]:
    """One session at a time picks a subnet and removes leftovers."""
    with open(STATE_DIR / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_leftovers() -> None:
    """Remove what crashed sessions left: state files nobody holds, and dsl<pid> things of no live session."""
    live = set()  # pids of the sessions alive
    for path in STATE_DIR.glob("dsl*.json"):
        with open(path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                live.add(_NAME.match(path.stem).group(1))
                continue
            try:
                state = json.loads(handle.read() or "{}")
            except ValueError:
                state = {}
            _remove_session(state)
            path.unlink(missing_ok=True)
    _remove_orphans(live)


def _remove_orphans(live: set[str]) -> None:
    """Namespaces and links named dsl<pid>... of no live session (one that crashed before its state file)."""
    netns = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", check=False).stdout, re.MULTILINE)
    for name in netns:
        match = _NAME.match(name)
        if match and match.group(1) not in live:
            _remove_session({"netns": [name]})
    for name in links:
        match = _NAME.match(name)
        if match and match.group(1) not in live:
            _ip("link", "del", name, check=False)


def _remove_session(state: dict[str, Any]) -> None:
    workdir = state.get("workdir")
    if workdir and Path(workdir).name.startswith("dsl"):
        _kill_mentioning(workdir)
    for netns in state.get("netns", []):
        _kill_netns_processes(_netns_inode(netns))
        _ip("netns", "del", netns, check=False)
    for link in state.get("links", []):
        _ip("link", "del", link, check=False)
    if workdir and Path(workdir).name.startswith("dsl"):
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_mentioning(workdir: str) -> None:
    """SIGKILL login-node processes whose command line names the session's files.

    Launchers reach the hosts through the session's ssh wrapper, config or key, so a
    horovodrun, mpirun or ssh left by a test that was itself killed still names them.
    """
    needle = workdir.encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue


# --- the fixture --------------------------------------------------------------------------
_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _teardown_on_signals(hosts: TestHosts) -> Iterator[None]:
    """SIGTERM and SIGHUP end the session like Ctrl-C does, so that every finally block runs.

    Their default action would end pytest at once, without fixture teardown or atexit,
    leaving the hosts behind. During the teardown itself they are ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if not hosts.closing:
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def open_test_hosts(names: Sequence[str] = HOST_NAMES) -> Iterator[TestHosts]:
    """Build the test hosts, and remove all of it however the block ends (Ctrl-C included).

    Raises Unavailable (before building anything) when this machine cannot have them.
    """
    hosts = TestHosts(names)
    atexit.register(hosts.close)  # a KeyboardInterrupt that skips finally blocks still runs atexit
    try:
        with _teardown_on_signals(hosts):
            yield hosts.start()
    finally:
        hosts.close()
        atexit.unregister(hosts.close)


@pytest.fixture(scope="session")
def test_hosts() -> Iterator[TestHosts]:
    """`hosta` and `hostb`, each a network namespace with its own sshd; skipped when impossible."""
    try:
        with open_test_hosts() as hosts:
            yield hosts
    except Unavailable as reason:
        pytest.skip(str(reason))
