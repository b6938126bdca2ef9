"""`dslrun doctor --hosts`: will this job run across these hosts, or hang?

horovodrun checks that ssh works and which interfaces are routable; the failures that
remain show up as hangs or as errors deep in one rank's log: another Python or Horovod on
one host, a data file one host cannot see, a run directory that is not shared, a port a
firewall blocks. This module checks each of them, per host, over ssh:

- reachable: `ssh -o BatchMode=yes` runs a command there;
- versions: the same interpreter path as here (`sys.executable`), and the same Python,
  dslrun, TensorFlow, Keras, Horovod (with its controllers and tensor operations), mpi4py
  at the same paths; Open MPI's orted at the same path on the PATH ssh commands see (plain
  mpirun starts it by name there), and the same mpirun version where one is on that PATH;
- interface: a network interface name that is up with an address on every host
  (`--network-interfaces` names the ones to require), as horovodrun's
  `--network-interfaces` and Open MPI's `btl_tcp_if_include` need;
- data: every file the pipeline names is readable (the pipeline file and the files it
  extends; the inputter's train/val/test sources — files, folders, glob patterns — and,
  for CSV sources, three listed images per CSV: the first, the middle and the last one;
  one image of up to three class folders for `image_folder`; the `.bin` files of
  `cifar10_binary`);
- model_dir: a token file written on the first host (in the nearest existing folder of
  `runner.model_dir`, so nothing is created) is read back on every other host;
- ports: every host listens on a free TCP port and every other host connects to it over
  the shared interface (what TensorFlow's gRPC servers, Gloo and Open MPI's TCP transport
  do on ephemeral ports), and each `--ports` port is free on every host.

The probe that runs on each host is `dsl.distributed.preflight_probe` (standard library only).
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.distributed.hosts import HostError, Ssh
from dsl.language.resolved import Component

PROBE_SOURCE = Path(__file__).with_name("preflight_probe.py")
MARKER = "DSLRUN-PROBE "
CHECKS = ("reachable", "versions", "interface", "data", "model_dir", "ports")
PACKAGES = ("python", "dslrun", "tensorflow", "keras", "horovod", "mpi4py", "mpirun", "orted")
# Compared only where found: horovodrun forwards PATH to its ranks, so mpirun on the remote
# PATH is not needed; orted is (plain mpirun starts it by name on every host).
OPTIONAL = ("mpirun",)


# ------------------------------------------------------------------------------- the probe
def probe_argv(request: dict[str, Any], python: str | None = None) -> list[str]:
    """The command that runs the probe with `request` (the same interpreter path as here)."""
    return [python or sys.executable, "-c", PROBE_SOURCE.read_text(encoding="utf-8"), json.dumps(request)]


def parse_answer(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            found: dict[str, Any] = json.loads(line[len(MARKER):])
            return found
    return None


def run_probe(ssh: Ssh, host: str, request: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    """The probe's answer from `host`; HostError saying why there is none."""
    result = ssh.run(host, probe_argv(request), timeout=timeout)
    answer = parse_answer(result.stdout)
    if answer is None:
        raise HostError(host, cannot_run_python(result), "versions")
    if "cwd_error" in answer:
        raise HostError(host, f"{answer['cwd_error']}; dslrun runs tasks in the same directory on every host", "data")
    return answer


def run_local_probe(request: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    result = subprocess.run(probe_argv(request), capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    answer = parse_answer(result.stdout)
    if answer is None:
        raise HostError("this machine", f"the probe failed: {result.stderr.strip()[-500:]}")
    return answer


def cannot_run_python(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (result.stderr or "").strip().splitlines() if line.strip()]
    why = lines[-1].strip() if lines else f"exit status {result.returncode}"
    return (f"{sys.executable} cannot run there ({why}); dslrun runs the same interpreter path on every host: "
            "install the same environment at the same path")


# --------------------------------------------------------------------- what the job reads
def data_items(inputter: Component, pipeline_files: Sequence[str], cwd: str) -> list[dict[str, str]]:
    """The files and folders every host must read, as absolute paths, with how to check each: the
    pipeline's files, the inputter's train/val/test sources, and what its type adds (`host_files`:
    a sample of the images a CSV lists, a binary set's batches)."""
    from dsl.language import registry

    items = [{"path": _absolute(path, cwd), "kind": "file"} for path in pipeline_files]
    for mode in ("train", "val", "test"):
        for value in _as_list(inputter.params.get(mode)):
            path = _absolute(str(value), cwd)
            kind = "glob" if glob.has_magic(path) else "dir" if os.path.isdir(path) else "file"
            items.append({"path": path, "kind": kind})
    kind_of = registry.lookup("inputter", inputter.type)
    if kind_of.host_files is not None:
        items += [{"path": _absolute(path, cwd), "kind": kind} for path, kind in kind_of.host_files(inputter.arguments(), cwd)]
    unique: dict[str, dict[str, str]] = {}
    for item in items:
        unique.setdefault(item["path"], item)
    return list(unique.values())


def pipeline_files(path: str) -> list[str]:
    """The pipeline file and every file it extends (each task reads them all)."""
    from dsl.language.resolve import load_tree

    tree = load_tree(path)
    files = [str(path)]
    for origin in tree.sources.entries.values():
        for location in (origin.value, origin.key):
            if location is not None and not location.file.startswith("<") and location.file not in files:
                files.append(location.file)
    return files


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _absolute(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


# ------------------------------------------------------------------------ comparing facts
def compare_packages(reference: dict[str, Any], remote: dict[str, Any], host: str) -> list[str]:
    """Each way `remote`'s stack differs from this machine's, in one sentence."""
    problems = []
    for name in PACKAGES:
        mine, theirs = reference.get(name), remote.get(name)
        if not mine or "error" in mine:
            continue  # nothing here to compare with
        label = {"orted": "orted (Open MPI's daemon)"}.get(name, name)
        if not theirs and name in OPTIONAL:
            continue
        if not theirs or "error" in theirs:
            why = f" ({theirs['error']})" if theirs and theirs.get("error") else ""
            where = " on the PATH of ssh commands" if name == "orted" else ""
            problems.append(f"{label} {_describe(mine)} here, not found on {host}{where}{why}")
            continue
        for key in ("version", "path", "controllers", "tensor_operations"):
            if key in mine and mine.get(key) != theirs.get(key):
                problems.append(f"{label} {key} {_show(theirs.get(key))} on {host}, {_show(mine.get(key))} here")
    return problems


def _describe(info: dict[str, Any]) -> str:
    return " ".join(str(info[key]) for key in ("version", "path") if info.get(key))


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]" if value else "[none]"
    return str(value)


def usable_interfaces(interfaces: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """name -> addresses of the interfaces that are up, have an address, and are not loopback."""
    return {name: info["addresses"] for name, info in sorted(interfaces.items())
            if info.get("up") and info.get("addresses") and not info.get("loopback")}


def shared_interfaces(found: dict[str, dict[str, list[str]]], wanted: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """(the interface names usable on every host, host -> problem).

    With `wanted` (--network-interfaces), each named interface must be usable on every host.
    Otherwise the reference is the first host: a host lacking every interface the first host
    has is the one reported (with what it has instead).
    """
    hosts = list(found)
    problems: dict[str, str] = {}
    if wanted:
        for host in hosts:
            missing = [name for name in wanted if name not in found[host]]
            if missing:
                problems[host] = (f"{', '.join(missing)} not up with an address here "
                                  f"(usable here: {_interface_list(found[host])})")
        return ([name for name in wanted if all(name in found[host] for host in hosts)]), problems
    common = [name for name in found[hosts[0]] if all(name in found[host] for host in hosts)]
    if common:
        return common, problems
    first = hosts[0]
    if not found[first]:
        problems[first] = "no interface but loopback is up with an address; other hosts cannot reach this one"
    for host in hosts[1:]:
        if not set(found[host]) & set(found[first]):
            problems[host] = (f"no interface name shared with {first} is up with an address here (here: "
                              f"{_interface_list(found[host])}; {first}: {_interface_list(found[first])}); "
                              "horovodrun --network-interfaces and mpirun btl_tcp_if_include need one name on every host")
    return common, problems


def _interface_list(interfaces: dict[str, list[str]]) -> str:
    return ", ".join(f"{name} {' '.join(addresses)}" for name, addresses in interfaces.items()) or "none"


# --------------------------------------------------------------------------------- report
@dataclass
class HostReport:
    """One row of the table, and the problems found on that host."""

    host: str
    cells: dict[str, str] = field(default_factory=lambda: dict.fromkeys(CHECKS, "-"))
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # printed, but the job can run

    def problem(self, check: str, message: str, cell: str) -> None:
        self.problems.append((check, message))
        self.cells[check] = cell

    def warn(self, check: str, message: str) -> None:
        self.warnings.append((check, message))

    def lines(self) -> list[str]:
        return [f"{self.host}: {check}: {message}" for check, message in self.problems]

    def warning_lines(self) -> list[str]:
        return [f"warning: {self.host}: {check}: {message}" for check, message in self.warnings]

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, **self.cells, "problems": [{"check": c, "message": m} for c, m in self.problems],
                "warnings": [{"check": c, "message": m} for c, m in self.warnings]}


def format_table(reports: Sequence[HostReport]) -> str:
    rows = [("host", *CHECKS)] + [(r.host, *(r.cells[c] for c in CHECKS)) for r in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


# ---------------------------------------------------------------------------------- checks
@dataclass
class Request:
    """What to check: the hosts, how to reach them, and what the job needs."""

    hosts: list[str]
    ssh: Ssh
    files: list[dict[str, str]] = field(default_factory=list)
    model_dir: str | None = None
    ports: list[int] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    cwd: str = field(default_factory=os.getcwd)


def check_hosts(request: Request) -> tuple[dict[str, Any], list[HostReport]]:
    """(this machine's stack, one report per host)."""
    reports = {host: HostReport(host) for host in request.hosts}
    token = _write_token(request, reports[request.hosts[0]]) if request.model_dir else None
    try:
        reference, answers = _gather_facts(request, token)
    finally:
        if token is not None:
            _remove_token(request, token)
    for host, answer in answers.items():
        _judge_host(request, reports[host], answer, reference, token)
    _judge_interfaces(request, reports, answers)
    _judge_connections(request, reports, answers)
    return reference, list(reports.values())


def for_each_host(function: Callable[[str], Any], hosts: Sequence[str]) -> dict[str, Any]:
    """host -> function(host), or the HostError it raised; all hosts at once."""

    def guarded(host: str) -> Any:
        try:
            return function(host)
        except HostError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return dict(zip(hosts, pool.map(guarded, hosts)))


def _write_token(request: Request, first: HostReport) -> dict[str, str] | None:
    name = f".dslrun-preflight-{uuid.uuid4().hex[:12]}"
    token = {"model_dir": request.model_dir or "", "name": name, "content": f"{first.host} {uuid.uuid4().hex}\n"}
    try:
        answer = run_probe(request.ssh, first.host, {"action": "token-write", "cwd": request.cwd, **token}, timeout=60)
    except HostError:
        return None  # reported by the facts round
    if "error" in answer:
        first.problem("model_dir", f"{request.model_dir}: {answer['error']}", "unwritable")
        return None
    return {**token, "folder": answer["folder"]}


def _remove_token(request: Request, token: dict[str, str]) -> None:
    try:
        run_probe(request.ssh, request.hosts[0], {"action": "token-remove", "cwd": request.cwd, **token}, timeout=60)
    except HostError:
        pass


def _gather_facts(request: Request, token: dict[str, str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    base = {"action": "facts", "cwd": request.cwd, "files": request.files, "ports": request.ports}

    def ask(host: str) -> dict[str, Any]:
        extra = {"token": token} if token and host != request.hosts[0] else {}
        return run_probe(request.ssh, host, {**base, **extra})

    local: dict[str, Any] = {}

    def ask_here() -> None:
        try:
            local.update(run_local_probe({"action": "facts"}))
        except (HostError, OSError, subprocess.SubprocessError) as exc:
            local["error"] = str(exc)

    thread = threading.Thread(target=ask_here)
    thread.start()
    answers = for_each_host(ask, request.hosts)
    thread.join()
    if "error" in local:
        raise HostError("this machine", f"cannot list its own stack to compare with: {local['error']}", "versions")
    return local.get("packages", {}), answers


def _judge_host(request: Request, report: HostReport, answer: Any, reference: dict[str, Any],
                token: dict[str, str] | None) -> None:
    if isinstance(answer, HostError):
        report.cells["reachable"] = "no" if answer.check == "reachable" else "yes"
        report.problem(answer.check, answer.message, {"reachable": "no", "versions": "differ"}.get(answer.check, "unreadable"))
        return
    report.cells["reachable"] = "yes"
    versions = compare_packages(reference, answer.get("packages", {}), report.host)
    report.cells["versions"] = "same"
    for message in versions:
        report.problem("versions", message, "differ")
    unreadable = {path: why for path, why in answer.get("files", {}).items() if why}
    report.cells["data"] = "ok" if request.files else "-"
    for path, why in unreadable.items():
        report.problem("data", f"cannot read {path} ({why})", "unreadable")
    _judge_model_dir(request, report, answer, token)
    busy = {port: why for port, why in answer.get("ports", {}).items() if why}
    for port, why in busy.items():
        report.problem("ports", f"port {port} is not free ({why})", "busy")


def _judge_model_dir(request: Request, report: HostReport, answer: dict[str, Any], token: dict[str, str] | None) -> None:
    if not request.model_dir or report.cells["model_dir"] != "-":
        return  # no pipeline, or the first host already reported it
    first = request.hosts[0]
    if token is None:
        return
    if report.host == first:
        report.cells["model_dir"] = "shared"
        return
    seen = answer.get("token", {})
    folder = token["folder"]
    if not seen.get("seen"):
        report.problem("model_dir", f"{request.model_dir} is not on storage shared with {first}: a file written in "
                       f"{folder} on {first} is not visible here; mount the same storage at the same path on every host",
                       "unshared")
    elif not seen.get("writable"):
        report.problem("model_dir", f"{folder} is not writable here", "read-only")
    else:
        report.cells["model_dir"] = "shared"


def _judge_interfaces(request: Request, reports: dict[str, HostReport], answers: dict[str, Any]) -> None:
    reachable = {host: usable_interfaces(a.get("interfaces", {})) for host, a in answers.items() if isinstance(a, dict)}
    if not reachable:
        return
    common, problems = shared_interfaces(reachable, request.interfaces)
    for host in reachable:
        reports[host].cells["interface"] = ",".join(common) or "none"
        if host in problems:
            reports[host].problem("interface", problems[host], "none")
        for name, address in public_addresses({name: reachable[host].get(name, []) for name in common}):
            reports[host].warn("interface", public_warning(name, address))


def public_addresses(interfaces: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(interface, address) of every globally routable address: the job's servers would listen on the internet."""
    import ipaddress

    found = []
    for name, addresses in interfaces.items():
        for address in addresses:
            try:
                if ipaddress.ip_address(address.split("%")[0]).is_global:
                    found.append((name, address))
            except ValueError:
                continue
    return found


def public_warning(interface: str, address: str) -> str:
    return (f"{interface} has the public address {address}: the job's servers (TensorFlow's gRPC servers, Horovod's "
            "rendezvous, Gloo's and MPI's peer ports) take unauthenticated connections, and some listen on every "
            "interface; run the job on a private network or behind the firewall rules in docs/multihost.md "
            "(What a job exposes on the network)")


def _judge_connections(request: Request, reports: dict[str, HostReport], answers: dict[str, Any]) -> None:
    """Each host listens on a free port; each other host connects to it over the shared interface."""
    hosts = [host for host, a in answers.items() if isinstance(a, dict) and reports[host].cells["interface"] not in ("-", "none")]
    if len(hosts) < 2:
        return
    interface = reports[hosts[0]].cells["interface"].split(",")[0]
    addresses = {host: _ipv4_first(usable_interfaces(answers[host]["interfaces"])[interface]) for host in hosts}
    listeners = for_each_host(lambda host: Listener(request, host, addresses[host]), hosts)
    try:
        open_ = {host: listener for host, listener in listeners.items() if not isinstance(listener, HostError)}
        for host, listener in listeners.items():
            if isinstance(listener, HostError):
                reports[host].problem("ports", f"cannot listen on a free TCP port: {listener.message}", "blocked")

        def connect(host: str) -> dict[str, Any]:
            targets = [[other, addresses[other], open_[other].port] for other in open_ if other != host]
            return run_probe(request.ssh, host, {"action": "connect", "cwd": request.cwd, "targets": targets}, timeout=60)

        results = for_each_host(connect, hosts)
    finally:
        for listener in listeners.values():
            if not isinstance(listener, HostError):
                listener.close()
    for host, result in results.items():
        if isinstance(result, HostError):
            reports[host].problem("ports", result.message, "blocked")
            continue
        for other, why in result.items():
            if why:
                reports[other].problem(
                    "ports", f"{host} cannot reach a TCP port opened here over {interface}: {why}; "
                    "open the firewall for TCP between the hosts (TensorFlow, Gloo and MPI use ephemeral ports)",
                    "blocked")
    for host in hosts:
        if reports[host].cells["ports"] == "-":
            reports[host].cells["ports"] = "ok"


def _ipv4_first(addresses: list[str]) -> str:
    return next((a for a in addresses if ":" not in a), addresses[0])


class Listener:
    """A probe listening on a free port on one host until closed (its ssh stdin is closed)."""

    def __init__(self, request: Request, host: str, address: str, timeout: float = 60) -> None:
        argv = request.ssh.argv(host, probe_argv({"action": "listen", "cwd": request.cwd, "seconds": 120,
                                                  "address": address}))
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        line: list[str] = []
        stdout, stderr = self.process.stdout, self.process.stderr
        assert stdout is not None and stderr is not None  # both are pipes
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        answer = parse_answer(line[0]) if line else None
        if answer is None or "port" not in answer:
            self.close()
            raise HostError(host, f"the listening probe did not start: {(stderr.read() or '').strip()[-300:]}")
        self.port = int(answer["port"])

    def close(self) -> None:
        try:
            if self.process.stdin:
                self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
