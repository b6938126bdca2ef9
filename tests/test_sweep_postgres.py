"""A sweep's study in PostgreSQL, continued from a second host: what several hosts driving one sweep do.

The test starts a real PostgreSQL server of its own (Debian's `postgresql`, which `make install`
and `make test` install when root) as the `postgres` system user (the server refuses to run as
root), and always stops it. It listens on the login node's address on the test hosts' bridge
(tests/testhosts.py: network namespaces with their own sshd), and its pg_hba.conf lets in that
address and `hostb`'s alone. Driver A runs the first trial of the study on the login node;
driver B runs inside `hostb` (its own network namespace: it reaches the server over its veth
and the bridge, as another machine would), with a sweep directory of its own, finds that trial
in the database and runs the next, which the study records beside the first. Skipped, with the
reason, where no server or no test hosts can be started.
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
from testhosts import TestHosts, test_hosts  # noqa: F401 (the session fixture)

from e2e_support import DSLRUN, MULTIRANK_ENV, kill_group, synthetic_data

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
# One short epoch of a small network: the test is about the study's storage, not the model.
SHRINK = ["--set", "runner.max_epochs=1", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]", "--set", "network={type: simple_cnn, filters: [8, 16], dense_units: 32}"]


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
def database(test_hosts: TestHosts) -> Iterator[str]:  # noqa: F811
    """A database `sweeps` on a server reachable from the login node and from hostb over the bridge."""
    binaries = _server_binaries()
    address = test_hosts.login_address
    root = Path(tempfile.mkdtemp(prefix="dslrun-pg-"))  # not under pytest's 0700 root: the postgres user reads it
    root.chmod(0o755)
    shutil.chown(root, "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    process = None
    try:
        subprocess.run([*as_postgres, str(binaries / "initdb"), "-D", str(root / "data"), "-U", "dslrun", "-A", "trust",
                        "--no-sync"], check=True, capture_output=True)
        with open(root / "data" / "pg_hba.conf", "a") as hba:  # the two hosts of the sweep, no other
            hba.write(f"host all dslrun {address}/32 trust\nhost all dslrun {test_hosts.hosts['hostb'].address}/32 trust\n")
        process = subprocess.Popen([*as_postgres, str(binaries / "postgres"), "-D", str(root / "data"), "-p", str(port),
                                    "-k", str(root), "-c", f"listen_addresses={address}", "-c", "fsync=off"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                connection = psycopg.connect(host=address, port=port, user="dslrun", dbname="postgres", autocommit=True)
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"PostgreSQL did not start: {process.stderr.read().decode() if process.stderr else ''}")
                time.sleep(0.3)
        connection.execute("CREATE DATABASE sweeps")
        connection.close()
        yield f"postgresql://dslrun@{address}:{port}/sweeps"
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
@pytest.mark.multihost
def test_a_driver_on_a_second_host_continues_the_study_through_postgresql(
    tmp_path: Path, database: str, test_hosts: TestHosts  # noqa: F811
) -> None:
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

    def driver(host: str, *more: str) -> list[str]:
        return [*DSLRUN, "sweep", str(file), *SHRINK, "--set", f"sweep.directory={tmp_path / host}", *more]

    first = subprocess.run(driver("host-a"), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    assert f"study 'shared' in {database}: 0 of 1 trials done" in first.stderr
    assert "127.0.0.1" not in database
    try:
        second = test_hosts.run("hostb", driver("host-b", "--set", "sweep.max_trials=2"), env=env,
                                timeout=300)
    finally:
        test_hosts.kill_strays()
    assert second.returncode == 0, second.stderr
    assert f"study 'shared' in {database}: 1 of 2 trials done" in second.stderr
    assert "trial 1 finished" in second.stderr
    assert (tmp_path / "host-a" / "trial-0000" / "trial.yaml").is_file()
    assert (tmp_path / "host-b" / "trial-0001" / "trial.yaml").is_file()
    # The report driver B ends with: both trials, from the one study both hosts share.
    states = [line.split()[:2] for line in second.stderr.splitlines() if line.startswith(("0 ", "1 "))]
    assert states == [["0", "complete"], ["1", "complete"]], second.stderr


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
