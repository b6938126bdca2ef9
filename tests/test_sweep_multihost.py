"""A sweep's trials placed on the hosts `sweep.hosts` gives, two at once (`parallel_trials: 2`).

The hosts are network namespaces with their own sshd (tests/testhosts.py); the sweep runs on
the login node and each trial reaches its host through `horovodrun -H host:1`, as on a
cluster. Which trial ran where is read from the hosts themselves (the dslrun processes seen
inside each namespace), not from what the sweep prints; both trials must be seen running at
the same moment, each on its own host, in its own run directory, with its own horovodrun
ports (two horovodruns on the login node at once: a clash would fail a trial). The sweep names
the hosts' interface (sweep.network_interfaces), as the other multi-host tests do: horovodrun's
own search caches its answer per host name in ~/.horovod, which another session's `hostb`
(another bridge) would have written.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from testhosts import TestHosts, test_hosts  # noqa: F401 (the session fixture)

from e2e_support import DSLRUN, kill_group, synthetic_data

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.multihost]

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"
SHRINK = ["--set", "runner.max_epochs=1", "--set", "inputter.batch_size=16", "--set", "inputter.num_classes=4",
          "--set", "inputter.image_shape=[16, 16, 3]",
          "--set", "network={type: simple_cnn, filters: [8, 16], dense_units: 32}"]


def trials_in_hosts(hosts: TestHosts) -> dict[str, set[str]]:
    """host -> the trial directories of the dslrun runs now running inside it."""
    found: dict[str, set[str]] = {name: set() for name in hosts.hosts}
    for name, host in hosts.hosts.items():
        for process in host.processes():
            if process.argv[1:4] == ["-m", "dsl", "run"]:
                found[name].add(Path(process.argv[-1]).parent.name)
    return found


def test_parallel_trials_run_at_once_each_on_a_host_of_sweep_hosts(test_hosts: TestHosts, tmp_path: Path) -> None:  # noqa: F811
    data = synthetic_data(tmp_path / "data", num_train=64, num_val=32, image_size=16)
    file = tmp_path / "tune.yaml"
    file.write_text(f"""\
extends: {QUICKSTART}
name: placed
sweep:
  directory: {tmp_path / 'sweep'}
  metric: val/accuracy
  method: grid
  max_trials: 2
  parallel_trials: 2
  hosts: ['hosta:1', 'hostb:1']
  network_interfaces: {test_hosts.interface}
  parameters:
    modeler.optimizer.learning_rate: {{type: choice, values: [0.05, 0.1]}}
""", encoding="utf-8")
    env = {**test_hosts.env, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "DATA_DIR": str(data)}
    log = tmp_path / "sweep.log"
    with open(log, "w") as out:
        process = test_hosts.popen([*DSLRUN, "sweep", str(file), *SHRINK], stdout=out, stderr=subprocess.STDOUT,
                                   env=env, cwd=tmp_path)
    placed: dict[str, set[str]] = {}  # trial directory -> hosts it was seen on
    together = False  # both trials seen running at one moment
    try:
        deadline = time.monotonic() + 400
        while process.poll() is None and time.monotonic() < deadline:
            running = trials_in_hosts(test_hosts)
            for host, trials in running.items():
                for trial in trials:
                    placed.setdefault(trial, set()).add(host)
            together |= len(set().union(*running.values())) == 2
            time.sleep(0.3)
        assert process.wait(timeout=30) == 0, log.read_text()
        assert trials_in_hosts(test_hosts) == {"hosta": set(), "hostb": set()}  # no rank outlived its trial
    finally:
        kill_group(process)
        test_hosts.kill_strays()
    output = log.read_text()
    assert placed == {"trial-0000": {"hosta"}, "trial-0001": {"hostb"}}, (placed, output)
    assert together, output
    for number, host in ((0, "hosta"), (1, "hostb")):
        trial = tmp_path / "sweep" / f"trial-{number:04d}"
        command = f"horovodrun -np 1 -H {host}:1 --network-interfaces {test_hosts.interface} --gloo "
        assert command in (trial / "trial.log").read_text().splitlines()[0]
        assert f"trial {number} finished: val/accuracy " in output, output
        assert (trial / "metrics.jsonl").is_file()
