"""The probe `dslrun doctor --hosts` and `dslrun launch --hosts` run on every host.

Its source is sent over ssh and run as `PYTHON -c SOURCE REQUEST_JSON` by the same interpreter
path as on the launching machine, so it works (and says what is wrong) even where dslrun
or TensorFlow is missing. Standard library only, on purpose. It prints one line
`DSLRUN-PROBE <json>` with its answer; everything else on stdout/stderr is noise.

Actions (`request["action"]`):
- `facts`: interpreter, package versions and paths, network interfaces, readable files,
  the model_dir token, free fixed ports;
- `token-write` / `token-remove`: the shared-storage token in the nearest existing folder
  of model_dir (no folder is created);
- `ports`: `count` free TCP ports, the address ssh reached, interface addresses;
- `listen`: listen on a free port, print it, serve until stdin closes (or `seconds`);
- `connect`: try a TCP connection to each `[name, address, port]`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

MARKER = "DSLRUN-PROBE "


def _answer(value: Any) -> None:
    sys.stdout.write(MARKER + json.dumps(value) + "\n")
    sys.stdout.flush()


def _error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------ packages
def _module(name: str) -> dict[str, Any]:
    try:
        module = __import__(name, fromlist=["__name__"])
    except Exception as exc:  # any failure means "not usable here"
        return {"error": _error(exc).splitlines()[0][:200]}
    path = getattr(module, "__file__", None)
    return {"version": str(getattr(module, "__version__", "unknown")),
            "path": os.path.dirname(os.path.abspath(path)) if path else None}


def _horovod(info: dict[str, Any]) -> dict[str, Any]:
    if "error" in info:
        return info
    try:
        import horovod.tensorflow as hvd
    except Exception as exc:
        return {**info, "error": f"horovod.tensorflow: {_error(exc).splitlines()[0][:200]}"}
    built = {"MPI": hvd.mpi_built(), "Gloo": hvd.gloo_built(), "NCCL": hvd.nccl_built(), "DDL": hvd.ddl_built(),
             "CCL": hvd.ccl_built()}
    return {**info, "controllers": sorted(k for k in ("MPI", "Gloo") if built[k]),
            "tensor_operations": sorted(k for k, v in built.items() if v)}


def _program(name: str, version: bool = False) -> dict[str, Any] | None:
    import shutil

    path = shutil.which(name)
    if path is None:
        return None
    info: dict[str, Any] = {"path": path}
    if version:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
            info["version"] = out.splitlines()[0] if out else "unknown"
        except (OSError, subprocess.SubprocessError):
            info["version"] = "unknown"
    return info


def packages() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as dsl/__init__.py: this probe may run without it
    facts: dict[str, Any] = {
        "python": {"path": sys.executable, "version": sys.version.split()[0]},
        "dslrun": _module("dsl"),
        "tensorflow": _module("tensorflow"),
    }
    if "error" not in facts["tensorflow"]:
        import tensorflow as tf

        keras = "tf_keras" if getattr(tf.keras, "__name__", "").startswith("tf_keras") else "keras"
        version = _module(keras).get("version", "unknown")
        facts["keras"] = {"version": str(version)}
    facts["horovod"] = _horovod(_module("horovod"))
    facts["mpi4py"] = _module("mpi4py")
    facts["mpirun"] = _program("mpirun", version=True)
    facts["orted"] = _program("orted")
    return facts


# ---------------------------------------------------------------------------- interfaces
def interfaces() -> dict[str, dict[str, Any]]:
    """name -> {up, addresses}; from `ip -j addr`, else /sys/class/net (IPv4 by ioctl)."""
    try:
        out = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            found = {}
            for item in json.loads(out.stdout):
                flags = item.get("flags", [])
                found[item["ifname"]] = {
                    "up": "UP" in flags and ("LOWER_UP" in flags or item.get("operstate") == "UNKNOWN"),
                    "loopback": "LOOPBACK" in flags,
                    "addresses": [a["local"] for a in item.get("addr_info", []) if a.get("scope") != "link"],
                }
            return found
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        pass
    return _sysfs_interfaces()


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def _sysfs_interfaces() -> dict[str, dict[str, Any]]:
    import fcntl
    import struct

    found = {}
    for name in sorted(os.listdir("/sys/class/net")):
        base = f"/sys/class/net/{name}"
        try:
            flags = int(_read(f"{base}/flags"), 16)
            operstate = _read(f"{base}/operstate")
        except (OSError, ValueError):
            continue
        addresses = []
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            addresses.append(socket.inet_ntoa(packed[20:24]))
        found[name] = {"up": bool(flags & 1) and operstate in ("up", "unknown"), "loopback": bool(flags & 8),
                       "addresses": addresses}
    return found


# ---------------------------------------------------------------------------------- files
def check_file(item: dict[str, str]) -> str | None:
    """None when `item` (path + kind file|dir|glob|any) is readable here, else why not."""
    path, kind = item["path"], item.get("kind", "any")
    try:
        if kind == "glob":
            matches = [p for p in glob.glob(path) if os.path.isfile(p)]
            if not matches:
                return "the pattern matches no file"
            for match in matches[:3]:
                with open(match, "rb") as handle:
                    handle.read(1)
            return None
        if kind == "dir" or (kind == "any" and os.path.isdir(path)):
            os.listdir(path)
            return None if os.path.isdir(path) else "not a directory"
        with open(path, "rb") as handle:
            handle.read(1)
        return None
    except OSError as exc:
        return _error(exc)


# ------------------------------------------------------------------------- model_dir token
def nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def token_write(request: dict[str, Any]) -> dict[str, Any]:
    folder = nearest_existing(request["model_dir"])
    token = os.path.join(folder, request["name"])
    try:
        with open(token, "x") as handle:
            handle.write(request["content"])
    except OSError as exc:
        return {"folder": folder, "error": f"cannot write {token} ({_error(exc)})"}
    return {"folder": folder}


def token_read(request: dict[str, Any]) -> dict[str, Any]:
    token = os.path.join(request["folder"], request["name"])
    try:
        with open(token) as handle:
            seen = handle.read() == request["content"]
    except OSError as exc:
        return {"seen": False, "error": _error(exc), "writable": os.access(request["folder"], os.W_OK)}
    return {"seen": seen, "writable": os.access(request["folder"], os.W_OK)}


def token_remove(request: dict[str, Any]) -> dict[str, Any]:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(request["folder"], request["name"]))
    return {}


# ---------------------------------------------------------------------------------- ports
def port_free(port: int) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            return _error(exc)
    return None


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("0.0.0.0", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def ssh_address() -> str | None:
    """The address of this host that the ssh connection arrived at (SSH_CONNECTION's third word)."""
    words = os.environ.get("SSH_CONNECTION", "").split()
    return words[2] if len(words) == 4 else None


def listen(request: dict[str, Any]) -> None:
    import select
    import threading

    # On the address under test only (the job's interface), not on every interface: the probe
    # is a server of ours, and must expose no more than the job it checks for.
    family = socket.AF_INET6 if ":" in request.get("address", "") else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((request.get("address", "0.0.0.0"), 0))
    server.listen(16)
    _answer({"port": server.getsockname()[1]})
    closed = threading.Event()

    def watch_stdin() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 1024):
                pass
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    deadline = time.monotonic() + float(request.get("seconds", 60))
    while not closed.is_set() and time.monotonic() < deadline:
        ready, _, _ = select.select([server], [], [], 0.2)
        if ready:
            conn, _ = server.accept()
            with contextlib.suppress(OSError):
                conn.sendall(b"dslrun\n")
            conn.close()
    server.close()


def connect(request: dict[str, Any]) -> dict[str, Any]:
    results = {}
    for name, address, port in request["targets"]:
        try:
            with socket.create_connection((address, int(port)), timeout=float(request.get("timeout", 5))) as sock:
                sock.settimeout(float(request.get("timeout", 5)))
                results[name] = None if sock.recv(7) == b"dslrun\n" else "something else answered"
        except OSError as exc:
            results[name] = f"cannot connect to {address}:{port} ({_error(exc)})"
    return results


# ---------------------------------------------------------------------------------- main
def facts(request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {"cwd": os.getcwd()}
    if request.get("packages", True):
        answer["packages"] = packages()
    answer["interfaces"] = interfaces()
    answer["files"] = {item["path"]: check_file(item) for item in request.get("files", [])}
    if request.get("token"):
        answer["token"] = token_read(request["token"])
    answer["ports"] = {str(port): port_free(int(port)) for port in request.get("ports", [])}
    return answer


def ports(request: dict[str, Any]) -> dict[str, Any]:
    for path in request.get("remove", []):
        with contextlib.suppress(OSError):
            os.unlink(path)
    return {"ports": free_ports(int(request.get("count", 0))), "ssh_address": ssh_address(),
            "interfaces": interfaces() if request.get("interfaces") else {}}


ACTIONS = {"facts": facts, "token-write": token_write, "token-remove": token_remove, "ports": ports,
           "connect": connect}


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    cwd = request.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as exc:
            _answer({"cwd_error": f"cannot enter the working directory {cwd} ({_error(exc)})"})
            return 0
    if request["action"] == "listen":
        listen(request)
        return 0
    _answer(ACTIONS[request["action"]](request))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
