"""The parameter-server backend: TF_CONFIG roles, schema, and central-storage training.

The cluster mode is exercised end to end (variables on the ps task) in test_launch.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from backends.ps import ParameterServerBackend, read_tf_config
from backends.select import select_backend
from dsl.language.errors import DslError

from e2e_support import DSLRUN, ENV

CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4"]}

PIPELINE = """\
version: 1
name: tiny_cs
seed: 7
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [16, 16, 3]
  batch_size: 16
  shuffle_buffer: 64
augmenter: {{type: cifar, padding: 2}}
network: {{type: resnet_cifar, depth: 20, batch_norm_momentum: 0.9}}  # the quickstart network
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
callbacks:
  - {{type: train_basic}}
  - {{type: checkpoint, every_n_epochs: 1}}
  - {{type: train_summary, every_n_iters: 4}}
runner:
  model_dir: {run}
  workflow: [[train, 1], [val, 1]]
  max_epochs: 2
  steps_per_call: 3
"""


def tf_config(task_type: str, index: int = 0, cluster: dict | None = None) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster or CLUSTER, "task": {"type": task_type, "index": index}})}


def test_tf_config_gives_cluster_and_role() -> None:
    cluster, role, index = read_tf_config(tf_config("worker", 1))
    assert cluster == CLUSTER and role == "worker" and index == 1


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "TF_CONFIG is not set"),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not valid"),
        (tf_config("trainer"), "'trainer' is not one of chief, worker, ps, evaluator"),
        (tf_config("worker", 5), "worker:5 is not in the cluster"),
        (tf_config("chief", cluster={"chief": ["a:1"], "worker": ["b:1"]}), "has no ps task"),
    ],
)
def test_bad_tf_config_is_explained(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(DslError, match=expected):
        read_tf_config(environ)


def test_missing_tf_config_says_how_to_start_a_cluster() -> None:
    with pytest.raises(DslError, match="dslrun launch --backend ps"):
        ParameterServerBackend({"backend": "ps", "ps": {"mode": "cluster"}}, environ={}).setup()


def test_select_backend_gives_the_ps_backend_with_its_mode() -> None:
    backend = select_backend({"backend": "ps", "ps": {"mode": "central_storage"}}, environ={})
    assert isinstance(backend, ParameterServerBackend) and backend.mode == "central_storage"


def test_evaluator_role_acts_as_one_local_process() -> None:
    backend = ParameterServerBackend({"backend": "ps"}, environ=tf_config("evaluator"))
    backend.setup()
    assert backend.role == "evaluator" and not backend.drives_cluster
    assert (backend.num_shards, backend.shard_index, backend.placement.is_chief) == (1, 0, True)


def test_schema_checks_runner_ps() -> None:
    from dsl.language.schema import pipeline_schema

    runner = pipeline_schema()["$defs"]["runner"]["properties"]["ps"]
    assert runner["properties"]["mode"]["enum"] == ["cluster", "central_storage"]
    assert runner["properties"]["variable_partitioner"]["default"] is None


def test_validate_rejects_an_unknown_ps_mode(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(data=tmp_path, run=tmp_path / "run"))
    result = subprocess.run([*DSLRUN, "validate", str(path), "--set", "runner.ps.mode=async"],
                            capture_output=True, text=True, env=ENV, timeout=60)
    assert result.returncode != 0 and "runner.ps.mode" in result.stdout + result.stderr


@pytest.mark.slow
def test_central_storage_trains_and_evaluates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(data), "--num-train", "96", "--num-val", "32",
                    "--num-classes", "4", "--image-size", "16"], check=True, capture_output=True, env=ENV, timeout=120)
    path = tmp_path / "tiny_cs.yaml"
    run = tmp_path / "run"
    path.write_text(PIPELINE.format(data=data, run=run))
    result = subprocess.run(
        [*DSLRUN, str(path), "--set", "runner.backend=ps", "--set", "runner.ps.mode=central_storage"],
        capture_output=True, text=True, env=ENV, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ps central_storage: no GPU on this machine" in result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["mode"] == "train"]
    assert [r["epoch"] for r in train] == [1, 2] and train[-1]["step"] == 12
    assert all(r["loss"] == r["loss"] for r in records)  # no NaN
    assert (run / "checkpoints" / "ckpt-12.index").exists()
    # The checkpoint of a central-storage run loads into a plain local model.
    evaluated = subprocess.run([*DSLRUN, "eval", str(path), "--set", "runner.backend=ps"],
                               capture_output=True, text=True, env=ENV, timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr
    logged = [r for r in records if r["mode"] == "val"][-1]
    assert json.loads(evaluated.stdout.splitlines()[-1])["accuracy"] == pytest.approx(logged["accuracy"], abs=1e-6)
