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
from dsl.language.registry import register


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


# A user's own detector, as a plugin: one anchor per cell of one level, where the modeler matches the
# boxes against the anchors of the network section (here the defaults: 9 per cell on three levels).
DETECTOR_PLUGIN = """\
from dsl.language.registry import register


@register("network", "one_anchor_detector", params={}, description="one anchor per cell", batch=("image", "boxes"))
def build(params, context):
    import tensorflow as tf

    images = tf.keras.Input(shape=context.image_shape)
    cells = tf.keras.layers.Conv2D(4 + context.num_classes, 3, strides=16, padding="same")(images)
    return tf.keras.Model(images, tf.keras.layers.Reshape((-1, 4 + context.num_classes))(cells))
"""


def detection_variant(tmp_path: Path, name: str, network: str | None) -> Path:
    """The shipped detection pipeline as `name`.yaml, its network replaced by `network` when given."""
    shipped = Path(__file__).resolve().parents[1] / "pipelines" / "detection.yaml"
    text = shipped.read_text(encoding="utf-8").replace("$schema=../schemas", "$schema=schemas")
    if network is not None:
        text = text.replace("  type: retinanet\n", f"  type: {network}\n").replace(
            "  backbone: small\n  base_filters: 16\n  fpn_filters: 32\n  head_convs: 1\n", "")
        text = text[:text.index("  anchors:\n")] + text[text.index("\nmodeler:") + 1:]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def detection_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One `validate --build` (one TensorFlow start) of the shipped detection pipeline and of a
    variant whose network is a plugin detector with other anchors than the modeler's."""
    tmp_path = tmp_path_factory.mktemp("detection_build")
    (tmp_path / "one_anchor_detector_plugin.py").write_text(DETECTOR_PLUGIN, encoding="utf-8")
    files = [detection_variant(tmp_path, "shipped", None), detection_variant(tmp_path, "mismatch", "one_anchor_detector")]
    (tmp_path / "data").mkdir()
    for name in ("train.csv", "eval.csv"):  # there (empty: --build reads no data), or validate warns they are not
        (tmp_path / "data" / name).touch()
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "dsl", "validate", "--build", "--plugin", "one_anchor_detector_plugin",
                           *map(str, files)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    return tmp_path, done


@pytest.mark.slow
def test_build_traces_the_shipped_detection_pipeline_on_padded_boxes(
        detection_build: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    tmp_path, done = detection_build
    assert "2 files, 1 invalid, 1 error" in done.stderr, done.stdout + done.stderr
    assert str(tmp_path / "shipped.yaml") not in done.stdout + done.stderr
    assert "warning" not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_detector_whose_anchors_disagree_with_the_modeler_is_one_located_line(
        detection_build: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    tmp_path, done = detection_build
    assert done.returncode == 1
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1, done.stdout + done.stderr
    path = tmp_path / "mismatch.yaml"
    network_line = next(number for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                        if line == "  type: one_anchor_detector")
    assert errors[0].startswith(f"{path}:{network_line}:") and "error: network.type:" in errors[0]
    assert "the network's outputs, of shape (2, 16, 7)" in errors[0] and "'object_detection'" in errors[0]
    assert "Traceback" not in done.stderr
