"""The Horovod backend with real ranks: horovodrun (Gloo, MPI) and plain mpirun.

Each test starts two ranks on this machine (run alone with `pytest -m multiprocess`).
Every launcher is run under a timeout and in its own process group, which is killed at
the end, so no rank outlives its test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

from e2e_support import MULTIRANK_ENV as ENV
from e2e_support import checkpoint_steps, descendants, kill_group, run_in_group

LAUNCHERS = {
    "gloo": ["horovodrun", "-np", "2", "--gloo"],
    "mpi": ["horovodrun", "-np", "2", "--mpi"],
    "mpirun": ["mpirun", "-np", "2", "--oversubscribe"],
}

PIPELINE = """\
version: 1
name: hvd
seed: 11
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
  - {{type: checkpoint, every_n_epochs: 1, max_to_keep: 10}}
runner:
  model_dir: {run}
  workflow: {workflow}
  max_epochs: {epochs}
  lr_scaling: {lr_scaling}
  batch_scaling: {batch_scaling}
"""


def pipeline(tmp_path: Path, data: Path, name: str = "p", **values: object) -> Path:
    settings = {"batch": 16, "shuffle": 256, "augmenter": "cifar", "epochs": 2, "lr_scaling": "linear", "batch_scaling": "linear",
                "network": "{type: simple_cnn, filters: [8, 16], dense_units: 32}",
                "workflow": "[[train, 1], [val, 1]]"}
    settings.update(values)
    path = tmp_path / f"{name}.yaml"
    path.write_text(PIPELINE.format(data=data, run=tmp_path / f"run-{name}", **settings))
    return path


def launch(command: list[str], timeout: int = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_in_group(command, ENV if env is None else env, timeout)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hvd") / "synthetic"
    subprocess.run([sys.executable, "-m", "dsl", "data", "synthetic", "--out", str(out), "--num-train", "256",
                    "--num-val", "64", "--num-classes", "4", "--image-size", "16"], check=True, env=ENV,
                   capture_output=True)
    return out


def checkpoint_arrays(prefix: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(prefix))
            if name.startswith("model/")}


# Two ranks of every launcher training to the end with rank 0 alone writing (one header, one record
# per phase, one tag per output line, no TensorFlow banner): tests/test_shipped_pipelines.py's
# test_two_allreduce_ranks, on every shipped pipeline, checks it on the runs it trains anyway.


def test_mixed_float16_on_two_ranks_keeps_them_identical(tmp_path: Path, data: Path) -> None:
    # Gradients are allreduced while scaled and unscaled after: both ranks skip or apply
    # the same steps and move the loss scale the same way.
    path = pipeline(tmp_path, data, epochs=1, workflow="[[train, 1]]")
    result = launch([*LAUNCHERS["gloo"], "dslrun", str(path), "--set", "runner.precision=mixed_float16"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "identical on all 2 ranks" in result.stderr
    # Two ranks with a core each (this 2-core CI host) are told once, by the chief, to expect
    # one process's speed at best; a host with two cores a rank says nothing.
    told = result.stderr.count("dslrun: warning: 2 ranks on this host's")
    assert told == (1 if (os.cpu_count() or 1) < 4 else 0), result.stderr[-3000:]
    import tensorflow as tf

    prefix = str(tmp_path / "run-p" / "checkpoints" / "ckpt-8")
    saved = dict(tf.train.list_variables(prefix))
    assert any("loss_scale/current_loss_scale" in name for name in saved), sorted(saved)
    record = json.loads((tmp_path / "run-p" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 8 and np.isfinite(record["loss"])


def test_two_ranks_equal_one_rank_with_the_same_global_batch(tmp_path: Path, data: Path) -> None:
    """Sharding, gradient averaging and broadcast together: the same file (batch 64, the
    default runner.batch_scaling: none) on 2 ranks of 32 == 1 process of 64, step for step.

    No batch normalisation (its statistics are per rank), no augmentation, no shuffling,
    no dropout, and no lr scaling: the two runs then compute the same averaged gradient
    from the same 64 examples at every step. The only difference is the order of float32
    sums (per rank, then across ranks), a relative error near 1e-7 per step; after 8
    steps we allow rtol 1e-4 / atol 1e-5, far below the change one step makes (checked).
    """
    common = {"shuffle": 0, "augmenter": "none", "epochs": 2, "workflow": "[[train, 1]]", "lr_scaling": "auto",
              "batch_scaling": "none", "network": "{type: mlp, hidden_units: [32]}"}
    one = pipeline(tmp_path, data, "one", batch=64, **common)
    two = pipeline(tmp_path, data, "two", batch=64, **common)
    result = subprocess.run([sys.executable, "-m", "dsl", str(one)], capture_output=True, text=True, env=ENV,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    result = launch([*LAUNCHERS["gloo"], "dslrun", str(two)])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    single = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-8")
    double = checkpoint_arrays(tmp_path / "run-two" / "checkpoints" / "ckpt-8")
    earlier = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-4")
    assert single.keys() == double.keys() and single
    for name in single:
        np.testing.assert_allclose(double[name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
    # The tolerance is meaningful: four more steps moved the weights far more than it.
    moved = max(float(np.max(np.abs(single[n] - earlier[n]))) for n in single)
    assert moved > 1e-3


BN_NETWORK = "{type: simple_cnn, filters: [8, 16], dense_units: 32, batch_norm: true}"


def test_batch_norm_two_ranks_match_one_rank_with_the_same_global_batch(tmp_path: Path, data: Path) -> None:
    """2 x 32 against 1 x 64 on a network with batch normalisation, the same 64 examples per
    step (no augmentation, no shuffling, no lr scaling), after 8 steps.

    - `runner.horovod.sync_batch_norm`: the batch statistics are those of all 64 examples,
      so trainable weights and moving statistics agree to atol 3e-3 (measured: 7.6e-4 at
      most). Not closer, because this short run amplifies rounding: a 1e-7 nudge to one
      kernel of the one-process run grows to 3e-4 in the same 8 steps (float32 sums here
      run in another order).
    - Without it each rank normalises with its own 32 examples and the moving statistics
      are averaged across ranks after every call: the ranks agree exactly (the digest),
      and stay within atol 8e-2 of one process (measured: 3.2e-2), farther than sync BN.
    Four more steps move the weights by more than 1e-1: the tolerances mean something.
    """
    common = {"shuffle": 0, "augmenter": "none", "epochs": 2, "workflow": "[[train, 1]]", "lr_scaling": "auto",
              "batch_scaling": "none", "network": BN_NETWORK}
    one = pipeline(tmp_path, data, "one", batch=64, **common)
    result = subprocess.run([sys.executable, "-m", "dsl", str(one)], capture_output=True, text=True, env=ENV,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, sync in (("sync", "true"), ("plain", "false")):
        two = pipeline(tmp_path, data, name, batch=64, **common)
        result = launch([*LAUNCHERS["gloo"], "dslrun", str(two), "--set", f"runner.horovod.sync_batch_norm={sync}"])
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "identical on all 2 ranks" in result.stderr

    single = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-8")
    earlier = checkpoint_arrays(tmp_path / "run-one" / "checkpoints" / "ckpt-4")
    synced = checkpoint_arrays(tmp_path / "run-sync" / "checkpoints" / "ckpt-8")
    plain = checkpoint_arrays(tmp_path / "run-plain" / "checkpoints" / "ckpt-8")
    assert any("moving_variance" in name for name in single) and single.keys() == synced.keys() == plain.keys()
    for name in single:
        np.testing.assert_allclose(synced[name], single[name], rtol=0, atol=3e-3, err_msg=name)
        np.testing.assert_allclose(plain[name], single[name], rtol=0, atol=8e-2, err_msg=name)

    def farthest(arrays: dict) -> float:
        return max(float(np.max(np.abs(arrays[n] - single[n]))) for n in single)

    assert farthest(synced) < farthest(plain)
    assert farthest(earlier) > 1e-1


UNEVEN_SHARES = """\
import sys

import numpy as np

import dsl  # noqa: F401  (picks dslrun's Keras before TensorFlow is imported)
import horovod.tensorflow as hvd
import tensorflow as tf

from backends._sync_batch_norm import horovod_switchable

hvd.init()
batch = np.load(sys.argv[1])
rows = [slice(0, 7), slice(7, 8)][hvd.rank()]  # rank 0 holds 7 examples, rank 1 one
mine = tf.constant(batch["images"][rows])
layer = horovod_switchable()(fused=False)
with tf.GradientTape() as tape:
    tape.watch(mine)
    out = layer(mine, training=True)
    loss = tf.reduce_sum(tf.sin(out) * batch["weights"][rows])
inputs, gamma = tape.gradient(loss, [mine, layer.gamma])
np.savez(sys.argv[2] + str(hvd.rank()), out=out.numpy(), inputs=inputs.numpy(), gamma=gamma.numpy(),
         moving_variance=layer.moving_variance.numpy())
"""


def test_synchronised_batch_norm_on_uneven_shares_is_one_process_of_the_whole_batch(tmp_path: Path) -> None:
    """Two real ranks holding 7 examples and 1 (what `drop_remainder: false` leaves at the end of
    an epoch) normalise, update their moving variance and take gradients exactly as one process
    does with all 8: each rank's outputs and input gradients are its rows of one process's, and
    the ranks' gamma gradients add up to one process's. Horovod's own layer weighs the ranks
    equally, so its outputs here are off by more than 0.5 (the last assertion's reference)."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    images = np.concatenate([rng.normal(0.0, 1.0, (7, 4, 4, 3)), rng.normal(3.0, 1.0, (1, 4, 4, 3))])
    batch = {"images": images.astype(np.float32), "weights": rng.normal(0.0, 1.0, (8, 4, 4, 3)).astype(np.float32)}
    np.savez(tmp_path / "batch.npz", **batch)
    script = tmp_path / "uneven.py"
    script.write_text(UNEVEN_SHARES)
    result = launch([*LAUNCHERS["gloo"], sys.executable, str(script), str(tmp_path / "batch.npz"),
                     str(tmp_path / "rank")])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = [np.load(tmp_path / f"rank{rank}.npz") for rank in (0, 1)]

    images = tf.constant(batch["images"])
    layer = tf.keras.layers.BatchNormalization(fused=False)
    with tf.GradientTape() as tape:
        tape.watch(images)
        out = layer(images, training=True)
        loss = tf.reduce_sum(tf.sin(out) * batch["weights"])
    inputs, gamma = tape.gradient(loss, [images, layer.gamma])
    np.testing.assert_allclose(np.concatenate([r["out"] for r in ranks]), out.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([r["inputs"] for r in ranks]), inputs.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ranks[0]["gamma"] + ranks[1]["gamma"], gamma.numpy(), rtol=1e-4, atol=1e-5)
    for rank in ranks:
        np.testing.assert_allclose(rank["moving_variance"], layer.moving_variance.numpy(), rtol=1e-5)
    equal_weights = (batch["images"][:7].mean(axis=(0, 1, 2)) + batch["images"][7:].mean(axis=(0, 1, 2))) / 2
    assert np.min(np.abs(equal_weights - batch["images"].mean(axis=(0, 1, 2)))) > 0.5


def test_batch_norm_is_synchronised_by_default_at_8_per_rank(tmp_path: Path, data: Path) -> None:
    """The default `sync_batch_norm: auto` with the global batch 16 on 2 ranks (8 per rank): the
    header says it is on and why, and each rank normalises over all 16 examples, so after 8 steps
    the weights and moving statistics are those of one process of 16 (atol 3e-3, as with `true` in
    the test above), not those of ranks normalising their own 8 (the same run forced off differs
    by more than 1e-2, which the assertion on `farthest` below keeps meaningful)."""
    common = {"shuffle": 0, "augmenter": "none", "epochs": 1, "workflow": "[[train, 8]]", "lr_scaling": "auto",
              "batch_scaling": "none", "network": BN_NETWORK, "batch": 16}
    short = ["--set", "runner.max_epochs=null", "--set", "runner.max_iters=8"]
    one = pipeline(tmp_path, data, "one", **common)
    result = subprocess.run([sys.executable, "-m", "dsl", str(one), *short], capture_output=True, text=True, env=ENV,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    headers = {}
    for name, extra in (("auto", []), ("off", ["--set", "runner.horovod.sync_batch_norm=false"])):
        two = pipeline(tmp_path, data, name, **common)
        result = launch([*LAUNCHERS["gloo"], "dslrun", str(two), *short, *extra])
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        headers[name] = next(line for line in result.stdout.splitlines() if "pipeline hvd:" in line)
        # Horovod's synchronised layer reads `layer.updates`; tf-keras's warning about it is noise.
        assert "layer.updates" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert "sync batch norm on (auto: 8 examples per replica, below 16)" in headers["auto"]
    assert "sync batch norm off (runner.horovod.sync_batch_norm: false)" in headers["off"]
    single, auto, off = (checkpoint_arrays(tmp_path / f"run-{name}" / "checkpoints" / "ckpt-8")
                         for name in ("one", "auto", "off"))
    assert any("moving_variance" in name for name in single) and single.keys() == auto.keys()

    def farthest(arrays: dict) -> float:
        return max(float(np.max(np.abs(arrays[n] - single[n]))) for n in single)

    assert farthest(auto) < 3e-3 < 1e-2 < farthest(off), (farthest(auto), farthest(off))


def test_a_killed_rank_ends_the_job_quickly_naming_it(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data, epochs=500)
    process = subprocess.Popen([*LAUNCHERS["gloo"], "dslrun", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    try:
        victim = _wait_for_rank(process, rank=1, checkpoints=tmp_path / "run-p" / "checkpoints")
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        output, _ = process.communicate(timeout=90)
        took = time.monotonic() - killed_at
    finally:
        kill_group(process)
    assert process.returncode != 0
    assert took < 60, f"the job took {took:.0f} s to end after rank 1 died"
    assert "Process name: 1" in output and "Exit code: 137" in output


def test_one_interrupted_rank_stops_both_at_the_same_agreed_step(tmp_path: Path, data: Path) -> None:
    """SIGTERM to rank 1 alone: rank 0 learns it at the next agreement point (dsl/engine/stop_agreement.py),
    the chief saves there (so rank 1 stopped there too: a rank that went on would wait in a collective)."""
    from dsl.engine.stop_agreement import EVERY_STEPS

    path = pipeline(tmp_path, data, epochs=500, batch=5, workflow="[[train, 1]]")  # 256 / (5 x 2): 25 steps an epoch
    process = subprocess.Popen([*LAUNCHERS["gloo"], "dslrun", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    try:
        victim = _wait_for_rank(process, rank=1, checkpoints=tmp_path / "run-p" / "checkpoints")
        os.kill(victim, signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    finally:
        kill_group(process)
    saved = re.search(r"<stderr>:dslrun: interrupted by SIGTERM: saved a checkpoint at step (\d+)", output)
    assert saved, output[-3000:]
    step = int(saved.group(1))
    assert step % EVERY_STEPS == 0 or step % 25 == 0, step  # a multiple of 16, or an epoch's end
    # horovodrun names the first rank to exit: either may be first (both take the interrupted path
    # at the agreed step), and it exits 143 (128 + SIGTERM), not as a crash.
    assert re.search(r"Process name: [01]\nExit code: 143", output), output[-3000:]


# A user's callback that interrupts rank 1 alone at a phase's end, after the ranks' last agreement in
# that phase: the window a SIGTERM from outside hits now and then (the chief saving a checkpoint there).
SIGNAL_PLUGIN = """\
import os
import signal

from dsl.engine.hooks import Callback
from dsl.language.registry import register


@register("callback", "interrupt_rank_1", params={}, description="SIGTERM to rank 1 at the end of its first epoch's phase")
class InterruptRank1(Callback):
    def after_train_epoch(self, runner):
        self._interrupt(runner, "POINT" == "after_train_epoch")

    def after_val_epoch(self, runner):
        self._interrupt(runner, "POINT" == "after_val_epoch")

    def _interrupt(self, runner, here):
        if here and runner.epoch == 1 and os.environ.get("HOROVOD_RANK") == "1":
            os.kill(os.getpid(), signal.SIGTERM)
"""


@pytest.mark.parametrize(("point", "epochs"), [("after_train_epoch", 3), ("after_val_epoch", 1)])
def test_a_rank_interrupted_between_phases_stops_with_the_others(tmp_path: Path, data: Path, point: str,
                                                                  epochs: int) -> None:
    """SIGTERM on rank 1 after the last agreement of epoch 1's train phase (next: epoch 2) or of the
    run's last phase (next: the check that the ranks hold one model): the ranks agree before each
    phase and after the last, so both stop there and the chief saves step 25, instead of rank 1
    leaving while rank 0 waits for it in a collective ("Horovod has been shut down")."""
    (tmp_path / "interrupt_rank_1_plugin.py").write_text(SIGNAL_PLUGIN.replace("POINT", point))
    path = pipeline(tmp_path, data, epochs=epochs, batch=5)  # 256 / (5 x 2): 25 steps an epoch
    path.write_text(path.read_text().replace("  - {type: train_basic}\n",
                                             "  - {type: train_basic}\n  - {type: interrupt_rank_1}\n"))
    done = launch([*LAUNCHERS["gloo"], "dslrun", "run", "--plugin", "interrupt_rank_1_plugin", str(path)],
                  env={**ENV, "PYTHONPATH": str(tmp_path)})
    output = done.stdout + done.stderr
    assert "Horovod has been shut down" not in output, output[-3000:]
    assert "interrupted by SIGTERM: saved a checkpoint at step 25" in output, output[-3000:]
    assert re.search(r"Process name: [01]\nExit code: 143", output), output[-3000:]
    assert checkpoint_steps(tmp_path / "run-p") == [25]  # the epoch's checkpoint, saved again on the interrupt


def _wait_for_rank(process: subprocess.Popen, rank: int, checkpoints: Path) -> int:
    """PID of the dslrun process with HOROVOD_RANK=rank, once training has begun."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert process.poll() is None, "the job ended before a rank could be killed"
        if list(checkpoints.glob("ckpt-*.index")):
            for pid in descendants(process.pid):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if f"HOROVOD_RANK={rank}".encode() in environ and b"dslrun" in cmdline and b"python" in cmdline:
                    return pid
        time.sleep(0.5)
    raise AssertionError("no rank process found in time")
