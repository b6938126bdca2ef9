"""`runner.backend: collective` (TensorFlow's MultiWorkerMirroredStrategy) with real workers.

The unit tests read TF_CONFIG, plan a launch and validate pipelines without starting
TensorFlow. The end-to-end ones start two workers on this machine, with `dslrun launch
--backend collective --workers 2` or with TF_CONFIG set by hand as on real hosts, each in
its own process group under a timeout; every process must be gone at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from test_launch import Launcher, alive, descendants, wait_gone

from backends.collective import read_cluster, task_order
from backends.select import select_backend
from dsl.commands._doctor_backends import backend_support
from dsl.commands._tasks import cluster_spec, free_ports, plan_tasks
from dsl.language.errors import DslError

from e2e_support import DSLRUN, ENV, dslrun, kill_group

PIPELINE = """\
version: 1
name: coll
seed: 11
deterministic: {deterministic}
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: {batch}
  shuffle_buffer: {shuffle}
augmenter: {{type: {augmenter}}}
network: {network}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: checkpoint, every_n_iters: {every}, max_to_keep: 100}}
runner:
  backend: {backend}
  model_dir: {run}
  workflow: {workflow}
  max_epochs: {epochs}
  lr_scaling: {lr_scaling}
  batch_scaling: {batch_scaling}
"""
BN_NETWORK = "{type: simple_cnn, filters: [8, 16], dense_units: 32, batch_norm: true}"


def pipeline(tmp_path: Path, data: Path, name: str, **values: object) -> Path:
    settings = {"deterministic": "false", "batch": 16, "shuffle": 256, "augmenter": "cifar", "network": BN_NETWORK,
                "every": 4, "backend": "collective", "workflow": "[[train, 1], [val, 1]]", "epochs": 2,
                "lr_scaling": "linear", "batch_scaling": "linear"}
    settings.update(values)
    path = tmp_path / f"{name}.yaml"
    path.write_text(PIPELINE.format(data=data, run=tmp_path / f"run-{name}", **settings))
    return path


def checkpoint_arrays(prefix: Path, only_model: bool = True) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(prefix))
            if name.startswith("model/") or not only_model}


def launch(tmp_path: Path, path: Path, *args: str, timeout: float = 240) -> str:
    """`dslrun launch --backend collective --workers 2 FILE ARGS` to its end; its output. No process may be left."""
    launcher = Launcher(tmp_path, "--backend", "collective", "--workers", "2", str(path), *args)
    try:
        launcher.wait_for("dslrun launch: chief=")
        code = launcher.process.wait(timeout=timeout)
        out = launcher.output()
        assert code == 0, out[-4000:]
        assert wait_gone(launcher.seen) == set()
        return out
    finally:
        launcher.cleanup()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collective") / "synthetic"
    subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(out), "--num-train", "256", "--num-val", "64",
                    "--num-classes", "4", "--image-size", "16"], check=True, env=ENV, capture_output=True, timeout=120)
    return out


# ------------------------------------------------------------------------- unit tests
def test_tf_config_gives_the_cluster_and_rank_order() -> None:
    config = {"cluster": {"worker": ["a:1", "b:1"], "chief": ["c:1"]}, "task": {"type": "worker", "index": 1}}
    cluster, task_type, index = read_cluster({"TF_CONFIG": json.dumps(config)})
    assert (task_type, index) == ("worker", 1)
    assert task_order(cluster) == [("chief", 0), ("worker", 0), ("worker", 1)]  # rank 2
    assert task_order({"worker": ["a:1", "b:1"]}) == [("worker", 0), ("worker", 1)]  # worker:0 is the chief


@pytest.mark.parametrize("environ, expected", [
    ({}, "dslrun launch --backend collective"),
    ({"TF_CONFIG": "{"}, "TF_CONFIG is not valid"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "worker"}}'}, "runner.backend: ps"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator"}}'}, "does not have"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'}, "not in the cluster"),
])
def test_bad_tf_config_is_explained(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(DslError, match=expected.replace("(", r"\(")):
        read_cluster(environ)


def test_select_backend_gives_the_collective_backend() -> None:
    backend = select_backend({"backend": "collective", "collective": {"communication": "ring"}}, environ={})
    assert backend.name == "collective" and backend.settings["communication"] == "ring"


def test_launch_plans_a_chief_and_workers_without_ps() -> None:
    tasks = plan_tasks("p.yaml", ["runner.max_epochs=1"], cluster_spec(workers=2, ps=0), evaluator=False)
    assert [t.label for t in tasks] == ["chief", "worker:0", "worker:1"]
    configs = [json.loads(t.env["TF_CONFIG"]) for t in tasks]
    assert set(configs[0]["cluster"]) == {"chief", "worker"} and configs[2]["task"] == {"type": "worker", "index": 1}
    assert tasks[0].command[-4:] == ["--set", "runner.max_epochs=1", "--set", "runner.backend=collective"]
    assert [t.finishes for t in tasks] == [False, True, True]  # workers end on their own, with the chief


def test_launch_refuses_ps_settings_for_a_collective_cluster(tmp_path: Path) -> None:
    result = dslrun("launch", "--backend", "collective", "--ps", "1", str(tmp_path / "p.yaml"), check=False)
    assert result.returncode == 2 and "--ps only make sense with --backend ps" in result.stderr


def test_validate_names_settings_the_backend_would_ignore(tmp_path: Path) -> None:
    path = pipeline(tmp_path, tmp_path, "v", backend="horovod")
    path.write_text(path.read_text() + "  collective: {communication: ring}\n")
    result = dslrun("validate", str(path), check=False)
    assert result.returncode == 1 and "runner.collective configures the collective backend" in result.stdout
    result = dslrun("validate", str(path), "--set", "runner.backend=collective", "--set", "runner.elastic={}",
                    "--set", "runner.horovod.sync_batch_norm=true", check=False)
    assert "runner.elastic needs Horovod, but runner.backend is collective" in result.stdout, result.stdout
    assert "set runner.collective.sync_batch_norm: true instead" in result.stdout
    assert dslrun("validate", str(path), "--set", "runner.backend=collective").returncode == 0


def test_doctor_says_which_backends_run_and_why_not() -> None:
    facts = {"tensorflow": "2.15.1", "multi_worker_mirrored": True, "parameter_server": True, "horovod": None}
    support = backend_support(facts)
    assert support["collective"] is None and support["local"] is None and support["ps"] is None
    assert "Horovod is not installed" in support["horovod"]
    assert all(backend_support({"tensorflow": None}).values())


# ---------------------------------------------------------------------- two workers
@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_step_as_one_process_with_the_global_batch(tmp_path: Path, data: Path) -> None:
    """Sharding, the 1/replicas loss and the optimizer's sum together: the same batch 64 (the
    default runner.batch_scaling: none) as 2 x 32 == 1 x 64, step for step (no batch norm,
    augmentation or shuffling; rtol as in test_horovod)."""
    common = {"shuffle": 0, "augmenter": "none", "lr_scaling": "auto", "batch_scaling": "none",
              "workflow": "[[train, 1]]", "network": "{type: mlp, hidden_units: [32]}"}
    one = pipeline(tmp_path, data, "one", batch=64, backend="local", **common)
    dslrun(str(one))
    two = pipeline(tmp_path, data, "two", batch=64, **common)
    out = launch(tmp_path, two)
    assert "[chief] dslrun: weights digest" in out and "identical on all 2 ranks" in out
    # The chief alone prints and writes: one header, one metrics file, the checkpoints once.
    assert out.count("pipeline coll:") == 1 and "[worker:0] pipeline" not in out
    assert "global batch 64 = 2 x 32, learning rate 0.05 (x1, batch_scaling none)" in out
    records = [json.loads(line) for line in (tmp_path / "run-two" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["step"]) for r in records] == [("train", 4), ("train", 8)]
    single = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-8")
    double = checkpoint_arrays(tmp_path / "run-two" / "checkpoints" / "ckpt-8")
    earlier = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-4")
    assert single.keys() == double.keys() and single
    for name in single:
        np.testing.assert_allclose(double[name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert max(float(np.max(np.abs(single[n] - earlier[n]))) for n in single) > 1e-3


@pytest.mark.slow
@pytest.mark.multiprocess
def test_batch_norm_statistics_agree_and_validation_is_averaged(tmp_path: Path, data: Path) -> None:
    """Batch-norm statistics end identical on both workers (the digest covers them), close to one
    process with the global batch, closer with sync_batch_norm; the val score of the two
    workers (each its half, weighted) is the one `dslrun eval` computes alone from the checkpoint."""
    common = {"shuffle": 0, "augmenter": "none", "lr_scaling": "auto", "batch_scaling": "none"}
    one = pipeline(tmp_path, data, "one", batch=64, backend="local", **common)
    dslrun(str(one))
    for name, sync in (("sync", "true"), ("plain", "false")):
        two = pipeline(tmp_path, data, name, batch=64, **common)
        out = launch(tmp_path, two, "--set", f"runner.collective.sync_batch_norm={sync}")
        assert "identical on all 2 ranks" in out, out[-3000:]
    single = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-8")
    synced = checkpoint_arrays(tmp_path / "run-sync" / "checkpoints" / "ckpt-8")
    plain = checkpoint_arrays(tmp_path / "run-plain" / "checkpoints" / "ckpt-8")
    assert any("moving_variance" in name for name in single) and single.keys() == synced.keys() == plain.keys()

    def farthest(arrays: dict) -> float:
        return max(float(np.max(np.abs(arrays[n] - single[n]))) for n in single)

    assert farthest(synced) < 3e-3 and farthest(plain) < 8e-2 and farthest(synced) < farthest(plain)

    records = [json.loads(line) for line in (tmp_path / "run-plain" / "metrics.jsonl").read_text().splitlines()]
    workers = [r for r in records if r["mode"] == "val"][-1]
    alone = json.loads(dslrun("eval", str(tmp_path / "plain.yaml")).stdout)  # one process reads a collective run
    assert alone["step"] == workers["step"] == 8
    assert alone["accuracy"] == pytest.approx(workers["accuracy"], abs=1e-6)
    assert alone["loss"] == pytest.approx(workers["loss"], rel=1e-4)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_killed_mid_epoch_resumes_bit_identical(tmp_path: Path, data: Path) -> None:
    """Deterministic mode, dropout and augmentation: SIGKILL to the whole job after step 4, the same
    command again, and the end is the bits of a run never interrupted (optimizer, rng included)."""
    settings = {"deterministic": "true", "batch": 8, "every": 1, "workflow": "[[train, 1]]", "shuffle": 64,
                "network": "{type: simple_cnn, filters: [4], dense_units: 16, dropout: 0.5, batch_norm: true}"}
    reference = pipeline(tmp_path, data, "ref", **settings)
    cut = pipeline(tmp_path, data, "cut", **settings)
    launch(tmp_path, reference, "--set", "runner.max_iters=24", "--set", "runner.max_epochs=null")

    checkpoints = tmp_path / "run-cut" / "checkpoints"
    launcher = Launcher(tmp_path, "--backend", "collective", "--workers", "2", str(cut),
                        "--set", "runner.max_iters=24", "--set", "runner.max_epochs=null")
    try:  # 256 examples / (8 x 2) = 16 steps an epoch: step 4 is mid-epoch
        deadline = time.monotonic() + 180
        while not (checkpoints / "ckpt-4.index").exists():
            launcher.seen.update(descendants(launcher.process.pid))
            assert launcher.process.poll() is None and time.monotonic() < deadline, launcher.output()[-3000:]
            time.sleep(0.05)
    finally:
        launcher.cleanup()  # SIGKILL to the launcher and both workers
    assert wait_gone(launcher.seen) == set()
    out = launch(tmp_path, cut, "--set", "runner.max_iters=24", "--set", "runner.max_epochs=null")
    assert "resumed from" in out and "identical on all 2 ranks" in out

    final = checkpoint_arrays(checkpoints / "ckpt-24", only_model=False)
    expected = checkpoint_arrays(tmp_path / "run-ref" / "checkpoints" / "ckpt-24", only_model=False)
    assert final.keys() == expected.keys() and any(name.startswith("rng/") for name in final)
    assert [name for name in final if not np.array_equal(final[name], expected[name])] == []


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_killed_worker_ends_the_launch_naming_it_and_leaves_nothing(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data, "long", epochs=500)
    launcher = Launcher(tmp_path, "--backend", "collective", "--workers", "2", "--grace-seconds", "5", str(path))
    try:
        launcher.wait_for("[chief] pipeline coll:")
        worker = int(next(part.split("=")[1] for part in launcher.output().split() if part.startswith("worker:0=")))
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        code = launcher.process.wait(timeout=60)
        took = time.monotonic() - killed
        out = launcher.output()
        assert code != 0 and took < 60
        assert "task worker:0 exited with status -9 before the chief finished" in out, out[-3000:]
        assert wait_gone(launcher.seen) == set()
    finally:
        launcher.cleanup()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_silent_worker_is_declared_lost_within_a_minute_without_a_launcher(tmp_path: Path, data: Path) -> None:
    """As on real hosts (TF_CONFIG per process, nothing supervising them): worker:1 stops
    answering (SIGSTOP: no connection reset, as when a host vanishes); the coordination
    service's heartbeat timeout makes worker:0 stop with an error naming it."""
    path = pipeline(tmp_path, data, "lost", epochs=500)
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = []
    for index in range(2):
        config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen([*DSLRUN, "run", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, env={**ENV, "TF_CONFIG": config}, start_new_session=True))
    try:
        deadline = time.monotonic() + 180
        while not list((tmp_path / "run-lost" / "checkpoints").glob("ckpt-*.index")):
            assert all(p.poll() is None for p in processes) and time.monotonic() < deadline
            time.sleep(0.2)
        os.kill(processes[1].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        output, _ = processes[0].communicate(timeout=90)
        took = time.monotonic() - stopped
        assert processes[0].returncode == 1 and took < 60, f"{took:.0f} s:\n{output[-3000:]}"
        assert f"lost worker:1 (127.0.0.1:{ports[1]})" in output, output[-3000:]
    finally:
        for process in processes:
            kill_group(process)
    assert alive({p.pid for p in processes}) == set()
