"""What the end-to-end tests share: how to run dslrun as a user does, and tiny data."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dsl.sweep.trial import descendants  # noqa: F401  (one /proc walker: the sweep's, re-exported for the tests)

DSLRUN = [sys.executable, "-m", "dsl"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
# Put before a docs page's shell block whose commands need a plug-in package installed: the package's
# test runs them as written (tests/test_plugin_packages.py), tests/test_docs.py does not parse them
# against the bare CLI.
RUN_BY_PACKAGE_TEST = "<!-- run by tests/test_plugin_packages.py -->"
# For horovodrun/mpirun: the venv's launchers on PATH, and OpenMPI allowed to run as root.
MULTIRANK_ENV = {
    **ENV,
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}


def dslrun(*args: str, check: bool = True, timeout: int = 300,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`dslrun ARGS` in a subprocess (in ENV unless `env` is given); with `check`, a non-zero exit fails with its output."""
    result = subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env=ENV if env is None else env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"dslrun {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def synthetic_data(out: Path, num_train: int, num_val: int, image_size: int, num_classes: int = 4) -> Path:
    """A small learnable CSV+PNG set written by `dslrun data synthetic`."""
    dslrun("data", "synthetic", "--out", str(out), "--num-train", str(num_train), "--num-val", str(num_val),
           "--num-classes", str(num_classes), "--image-size", str(image_size))
    return out


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a launcher started with start_new_session=True and everything it started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def run_in_group(command: list[str], env: dict[str, str] | None = None,
                 timeout: float = 240) -> subprocess.CompletedProcess:
    """`command` (a launcher: horovodrun, mpirun, dslrun launch) to its end in its own process
    group, which is killed afterwards, also on a timeout: no rank outlives the test."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=MULTIRANK_ENV if env is None else env, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        kill_group(process)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def checkpoint_steps(run: Path) -> list[int]:
    """The steps of the checkpoints `run` holds now (max_to_keep prunes the oldest, so their count stops growing)."""
    return sorted(int(p.name[len("ckpt-"):-len(".index")]) for p in (run / "checkpoints").glob("ckpt-*.index"))


def checkpoint_arrays(prefix: Path) -> dict[str, np.ndarray]:
    """Every variable a checkpoint holds, by its name in the checkpoint."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(prefix))}


def assert_identical(first: Path, second: Path, rng: bool = True) -> None:
    """Two checkpoints hold the same variables, bit for bit (exact resume); with `rng`, the dropout
    generator's state among them (a pipeline without dropout and with a stateless augmenter has none)."""
    a, b = checkpoint_arrays(first), checkpoint_arrays(second)
    assert a.keys() == b.keys()
    assert not rng or any(name.startswith("rng/") for name in a), "the dropout generator state is not checkpointed"
    differing = [name for name in a if not np.array_equal(a[name], b[name])]
    assert not differing, f"{first} and {second} differ in {differing}"


def wait_for(path_glob: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until a file matching `path_glob` appears, failing with the output if `process` ends first."""
    deadline = time.time() + timeout
    while not list(path_glob.parent.glob(path_glob.name)):
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, f"{path_glob} did not appear"
        time.sleep(0.05)


def sigkill_when(args: list[str], path_glob: Path, env: dict[str, str], timeout: float = 120) -> None:
    """Run `args` until a file matching `path_glob` appears (a checkpoint mid-epoch), then SIGKILL
    it: the crash the resume tests recover from."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(path_glob, process, timeout)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def mlflow_server(root: Path, login: tuple[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real MLflow tracking server (SQLite backend, its files under `root`): (its URL, its
    process group's leader). Killed with everything it started when the block ends, on failure too.

    `login` (user, password): the server is MLflow's basic-auth app with that admin, and refuses
    any request without it. Its configuration (which holds the password) is written beside `root`.
    """
    port = free_port()
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
               "--workers", "1"]
    env = dict(os.environ)
    if login is not None:
        config = root.parent / f"{root.name}-auth.ini"
        config.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{root / 'auth.db'}\n"
                          f"admin_username = {login[0]}\nadmin_password = {login[1]}\n"
                          "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
        command += ["--app-name", "basic-auth"]
        env.update(MLFLOW_AUTH_CONFIG_PATH=str(config), MLFLOW_FLASK_SERVER_SECRET_KEY="dslrun-tests")
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed below, after the server
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # a deadline only: it starts in about 10 s on a quiet machine
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (OSError, http.client.HTTPException):  # not up yet (or, until it binds, another program's port)
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url, process
    finally:
        try:
            os.killpg(process.pid, signal.SIGCONT)  # a test may have stopped it
        except ProcessLookupError:
            pass
        kill_group(process)
        log.close()
