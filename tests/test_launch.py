"""`dslrun launch --backend ps`: a local parameter-server cluster trains, and leaves nothing behind.

Each test starts a real cluster (chief, 2 workers, 1 ps; one with an evaluator) on tiny
generated data. Processes are found through /proc while the launcher runs and must all be
gone afterwards: after a normal end, after SIGTERM to the launcher, and after SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dsl.commands._tasks import cluster_spec, free_ports, plan_tasks

from e2e_support import DSLRUN, ENV, descendants, dslrun

PIPELINE = """\
version: 1
name: tiny_ps
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
def alive(pids: set[int]) -> set[int]:
    """The pids that still run (zombies waiting to be reaped do not count)."""
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def wait_gone(pids: set[int], seconds: float = 15) -> set[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def kill_all(pids: set[int]) -> None:
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "synthetic"
    subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(out), "--num-train", "96", "--num-val", "32",
                    "--num-classes", "4", "--image-size", "16"], check=True, capture_output=True, env=ENV, timeout=120)
    return out


def write_pipeline(tmp_path: Path, data: Path, epochs: int) -> Path:
    path = tmp_path / "tiny_ps.yaml"
    path.write_text(PIPELINE.format(data=data, run=tmp_path / "run", epochs=epochs))
    return path


class Launcher:
    """A `dslrun launch` process whose output is collected in a file, and whose tree is tracked."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "launch.log"
        with open(self.log, "w") as handle:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen([*DSLRUN, "launch", *args], stdout=handle, stderr=subprocess.STDOUT,
                                            env=ENV, start_new_session=True)
        self.seen: set[int] = set()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while text not in self.output():
            self.seen.update(descendants(self.process.pid))
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"launcher never printed {text!r}:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        self.seen.update(descendants(self.process.pid))

    def cleanup(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        kill_all(self.seen)


# ------------------------------------------------------------------------- unit tests
def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(1024 <= port < 65536 for port in ports)


def test_every_task_gets_its_own_tf_config() -> None:
    cluster = cluster_spec(workers=2, ps=1)
    tasks = plan_tasks("p.yaml", ["runner.max_epochs=1"], cluster, evaluator=True)
    assert [t.label for t in tasks] == ["chief", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    configs = [json.loads(t.env["TF_CONFIG"]) for t in tasks]
    assert all(c["cluster"] == cluster for c in configs)
    assert "evaluator" not in cluster  # the evaluator is outside the training cluster
    assert configs[2]["task"] == {"type": "worker", "index": 1}
    assert tasks[0].command[-6:] == ["--set", "runner.max_epochs=1", "--set", "runner.backend=ps",
                                     "--set", "runner.ps.mode=cluster"]


# -------------------------------------------------------------------------- clusters
@pytest.mark.slow
@pytest.mark.multiprocess
def test_cluster_trains_to_the_end_with_variables_on_ps(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, epochs=2)
    # Two ps tasks and variables split between them: the evaluator (a local model) must still
    # read the checkpoints.
    launcher = Launcher(tmp_path, "--backend", "ps", "--workers", "2", "--ps", "2", "--evaluator", str(pipeline),
                        "--set", "runner.ps.variable_partitioner={min_shard_bytes: 1024}")
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        code = launcher.process.wait(timeout=240)
        out = launcher.output()
        assert code == 0, out[-4000:]
        assert len(launcher.seen) >= 6  # chief, two workers, two ps, evaluator
        placement = next(line for line in out.splitlines() if "model variables" in line)
        assert "/job:ps/replica:0/task:0" in placement and "/job:ps/replica:0/task:1" in placement, placement
        assert "/job:chief" not in placement and "/job:worker" not in placement, placement
        assert "[worker:1] dslrun: worker:1 serving" in out
        run = tmp_path / "run"
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in records if r["mode"] == "train"] == [1, 2]
        checkpoints = sorted(p.name[: -len(".index")] for p in (run / "checkpoints").glob("*.index"))
        assert checkpoints == ["ckpt-12", "ckpt-6"]
        evaluated = sorted(r["checkpoint"] for r in records if r["mode"] == "eval")
        assert evaluated == checkpoints  # the evaluator task: each checkpoint exactly once
        assert json.loads((run / "DONE").read_text())["step"] == 12
        assert wait_gone(launcher.seen) == set()
    finally:
        launcher.cleanup()
    # The partitioned run's checkpoints are read by the single-process commands too (the
    # optimizer slots saved per shard are not needed there).
    partitioned = ("--set", "runner.ps.variable_partitioner={min_shard_bytes: 1024}")
    result = json.loads(dslrun("eval", str(pipeline), *partitioned).stdout)
    assert result["step"] == 12 and result["checkpoint"].endswith("ckpt-12")
    image = next((data / "eval").glob("*.png"))
    prediction = json.loads(dslrun("predict", str(pipeline), *partitioned, str(image)).stdout.splitlines()[0])
    assert prediction["image"] == str(image)
    dslrun("export", str(pipeline), *partitioned, "--out", str(tmp_path / "exported"))
    assert (tmp_path / "exported" / "saved_model.pb").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_sigterm_to_the_launcher_saves_and_leaves_no_process(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, epochs=500)
    launcher = Launcher(tmp_path, "--workers", "2", "--ps", "1", "--grace-seconds", "20", str(pipeline))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        time.sleep(2)  # into the training loop
        launcher.process.send_signal(signal.SIGTERM)
        code = launcher.process.wait(timeout=60)
        out = launcher.output()
        assert code == 128 + signal.SIGTERM, out[-4000:]
        assert "[chief] dslrun: interrupted by SIGTERM: saved a checkpoint" in out, out[-4000:]
        assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.index"))
        assert wait_gone(launcher.seen) == set()
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_sigkill_to_the_launcher_takes_every_task_down(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, epochs=500)
    launcher = Launcher(tmp_path, "--workers", "2", "--ps", "1", str(pipeline))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        tasks = set(launcher.seen)
        assert len(tasks) >= 4
        launcher.process.kill()
        launcher.process.wait(timeout=10)
        assert wait_gone(tasks) == set()  # PR_SET_PDEATHSIG: the kernel ended them
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_failed_worker_stops_the_job_naming_it(tmp_path: Path, data: Path) -> None:
    pipeline = write_pipeline(tmp_path, data, epochs=500)
    launcher = Launcher(tmp_path, "--workers", "2", "--ps", "1", "--grace-seconds", "5", str(pipeline))
    try:
        launcher.wait_for("[chief] dslrun: ps cluster")
        worker = int(next(part.split("=")[1] for part in launcher.output().split() if part.startswith("worker:1=")))
        os.kill(worker, signal.SIGKILL)
        code = launcher.process.wait(timeout=60)
        out = launcher.output()
        assert code != 0
        assert "task worker:1 exited with status -9 before the chief finished" in out, out[-3000:]
        assert wait_gone(launcher.seen) == set()
    finally:
        launcher.cleanup()
