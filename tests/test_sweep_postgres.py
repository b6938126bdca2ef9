"""A sweep's study in PostgreSQL, continued by a second driver: what several hosts driving one sweep do.

The test starts a real PostgreSQL server of its own (Debian's `postgresql`, which `make install`
and `make test` install when root) on a free loopback port, as the `postgres` system user (the
server refuses to run as root), and always stops it. Driver A runs the first trial of the study;
driver B, with a sweep directory of its own as another host would have, finds that trial in the
database and runs the next. Skipped, with the reason, where no server can be started.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
SHRINK = ["--set", "runner.max_epochs=1", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]"]


def _server_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("needs Debian's postgresql (make install installs it when root): apt-get install postgresql")
    if os.geteuid() != 0:
        pytest.skip("starts PostgreSQL as the postgres user, which needs root")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres system user (Debian's postgresql package creates it)")
    pytest.importorskip("psycopg", reason='needs psycopg: pip install "dslrun[postgres]" (make install does)')
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    binaries = _server_binaries()
    root = Path(tempfile.mkdtemp(prefix="dslrun-pg-"))  # not under pytest's 0700 root: the postgres user reads it
    root.chmod(0o755)
    shutil.chown(root, "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    process = None
    try:
        subprocess.run([*as_postgres, str(binaries / "initdb"), "-D", str(root / "data"), "-U", "dslrun", "-A", "trust",
                        "--no-sync"], check=True, capture_output=True)
        process = subprocess.Popen([*as_postgres, str(binaries / "postgres"), "-D", str(root / "data"), "-p", str(port),
                                    "-k", str(root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                connection = psycopg.connect(host="127.0.0.1", port=port, user="dslrun", dbname="postgres", autocommit=True)
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"PostgreSQL did not start: {process.stderr.read().decode() if process.stderr else ''}")
                time.sleep(0.3)
        connection.execute("CREATE DATABASE sweeps")
        connection.close()
        yield f"postgresql://dslrun@127.0.0.1:{port}/sweeps"
    finally:
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGINT)  # PostgreSQL's fast shutdown
                process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            kill_group(process)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_second_driver_continues_the_study_through_postgresql(tmp_path: Path, database: str) -> None:
    data = synthetic_data(tmp_path / "data", num_train=64, num_val=32, image_size=16)
    env = {**MULTIRANK_ENV, "DATA_DIR": str(data)}
    file = tmp_path / "tune.yaml"
    file.write_text(f"""\
extends: {QUICKSTART}
name: shared
sweep:
  metric: val/accuracy
  max_trials: 1
  storage: {database}
  parameters:
    modeler.optimizer.learning_rate: {{type: log_uniform, low: 0.01, high: 0.5}}
""", encoding="utf-8")

    def driver(host: str, *more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*DSLRUN, "sweep", str(file), *SHRINK, "--set", f"sweep.directory={tmp_path / host}", *more],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)

    first = driver("host-a")
    assert first.returncode == 0, first.stderr
    assert f"study 'shared' in {database}: 0 of 1 trials done" in first.stderr
    second = driver("host-b", "--set", "sweep.max_trials=2")
    assert second.returncode == 0, second.stderr
    assert f"study 'shared' in {database}: 1 of 2 trials done" in second.stderr
    assert "trial 1 finished" in second.stderr
    assert (tmp_path / "host-a" / "trial-0000" / "trial.yaml").is_file()
    assert (tmp_path / "host-b" / "trial-0001" / "trial.yaml").is_file()
    status = subprocess.run([*DSLRUN, "sweep", str(file), "--status", "--set", f"sweep.directory={tmp_path / 'host-a'}"],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    states = [line.split()[1] for line in status.stdout.splitlines()[1:3]]
    assert states == ["complete", "complete"], status.stdout + status.stderr


def test_an_unreachable_storage_is_one_error_line(tmp_path: Path) -> None:
    file = tmp_path / "tune.yaml"
    port = _free_port()
    file.write_text(f"extends: {QUICKSTART}\nsweep:\n  storage: postgresql://nobody:secret@127.0.0.1:{port}/none\n"
                    "  parameters:\n    modeler.optimizer.learning_rate: {type: uniform, low: 0.01, high: 0.1}\n",
                    encoding="utf-8")
    result = subprocess.run([*DSLRUN, "sweep", str(file)], capture_output=True, text=True, env=MULTIRANK_ENV, cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dslrun: error: cannot open the study's storage "
                                                   f"postgresql://nobody@127.0.0.1:{port}/none: "), lines
    assert "secret" not in result.stderr
