"""`dslrun validate --build`: the network built on the declared shapes, one train and one val step
traced on zeros; a shape error is one located line; nothing read, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = """\
version: 1
name: tiny
inputter:
  type: image_classification_csv
  train: missing/train.csv
  val: missing/eval.csv
  num_classes: 3
  image_shape: [8, 8, 3]
  batch_size: 4
augmenter: {type: cifar, padding: 1}
network: {type: NETWORK}
modeler: {type: image_classification, optimizer: {type: adam, learning_rate: 0.01}}
runner: {max_epochs: 1, model_dir: RUNS/tiny}
"""

# A user's own network, as a plugin: per-pixel scores where the classification modeler wants one per image.
PLUGIN = """\
from dsl.registry import register


@register("network", "pixel_scores", params={}, description="per-pixel scores", batch=("image", "class"))
def build(params, context):
    import tensorflow as tf

    inputs = tf.keras.Input(shape=context.image_shape)
    return tf.keras.Model(inputs, tf.keras.layers.Conv2D(context.num_classes, 1, name="logits")(inputs))
"""


def validate_build(tmp_path: Path, network: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pixel_scores_plugin.py").write_text(PLUGIN, encoding="utf-8")
    path = tmp_path / "tiny.yaml"
    path.write_text(PIPELINE.replace("NETWORK", network).replace("RUNS", str(tmp_path / "runs")), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "dsl", "validate", "--build", "--plugin", "pixel_scores_plugin",
                           str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


@pytest.mark.slow
def test_build_traces_a_good_pipeline_without_data_or_run_directory(tmp_path: Path) -> None:
    done = validate_build(tmp_path, "simple_cnn")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 file, 0 invalid, 0 errors" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_shape_error_is_one_located_line_at_the_network(tmp_path: Path) -> None:
    done = validate_build(tmp_path, "pixel_scores")
    assert done.returncode == 1
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1, done.stdout + done.stderr
    assert errors[0].startswith(f"{tmp_path / 'tiny.yaml'}:11:") and "error: network.type:" in errors[0]
    assert "the network's outputs, of shape (2, 8, 8, 3)" in errors[0] and "tiny.yaml:12" in errors[0]
    assert "Traceback" not in done.stderr
