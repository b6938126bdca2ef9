"""One task of `dslrun launch --hosts`, on its host: sent over ssh, standard library only.

    ssh HOST PYTHON -c SOURCE REQUEST_JSON

Killing the local ssh client does not kill what it started on the other side, so this
wrapper stands between sshd and the task:

- it starts the task (the request's command, environment and working directory) in a
  session of its own, its output on the wrapper's stdout, i.e. the ssh connection;
- it reads the launcher's orders on stdin, one per line (`TERM`, `INT`, `KILL`), and sends
  that signal to the task's process group;
- when stdin closes — the ssh connection is gone because the launcher ended or was
  killed — it stops the task itself: SIGTERM, then SIGKILL after the grace period;
- the task gets PR_SET_PDEATHSIG, so it dies with the wrapper even if the wrapper is
  killed with SIGKILL;
- it exits with the task's status (128+N for signal N, as a shell does), which ssh returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

ORDERS = {b"TERM": signal.SIGTERM, b"INT": signal.SIGINT, b"KILL": signal.SIGKILL}


def _say(message: str) -> None:
    """A line to the launcher; the connection may be gone (a broken pipe must not stop the wrapper)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"dslrun launch: {message}\n")
        sys.stderr.flush()


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _follow_orders(task: subprocess.Popen[Any], grace: float) -> None:
    """Forward the launcher's orders; when the connection closes, stop the task."""
    pending = b""
    while True:
        try:
            chunk = os.read(0, 1024)
        except OSError:
            chunk = b""
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip() in ORDERS:
                _signal_group(task.pid, ORDERS[line.strip()])
    if task.poll() is None:
        _signal_group(task.pid, signal.SIGTERM)
        _say(f"the launcher's connection closed; stopping pid {task.pid} on {socket.gethostname()}")
        deadline = time.monotonic() + grace
        while task.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    _signal_group(task.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    label, host = request["label"], socket.gethostname()
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        _say(f"{label}: cannot enter {request['cwd']} on {host} ({exc.strerror}); every host needs the same paths")
        return 126
    try:
        task = subprocess.Popen(request["command"], env={**os.environ, **request["env"]}, stdin=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        _say(f"{label}: cannot start {request['command'][0]} on {host} ({exc.strerror})")
        return 127
    _say(f"{label} runs on {host} as pid {task.pid}")
    threading.Thread(target=_follow_orders, args=(task, float(request["grace"])), daemon=True).start()
    code = task.wait()
    _signal_group(task.pid, signal.SIGKILL)  # anything the task left behind in its group
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
