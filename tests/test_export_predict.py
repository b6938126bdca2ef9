"""`dslrun export` and `dslrun predict` as a user and a TF Serving client meet them.

One tiny model (8x8 grayscale, trained for two steps on RGB PNGs) is exported once; the
tests load the SavedModel, call both signatures and compare them with the model in memory
and with `dslrun predict`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dsl.cli import main

pytestmark = pytest.mark.slow

PIPELINE = """\
version: 1
name: serve
seed: 3
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 3
  image_shape: [8, 8, 1]
  batch_size: 8
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
callbacks:
  - {{type: checkpoint}}
runner:
  model_dir: {run}
  max_iters: 2
"""


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline whose run directory holds a checkpoint (RGB PNG files, a 1-channel model)."""
    from dsl.commands._training import build_runner
    from dsl.language.pipeline import load_resolved

    root = tmp_path_factory.mktemp("serve")
    data = root / "data"
    assert invoke("data", "synthetic", "--out", str(data), "--num-train", "24", "--num-val", "6",
                  "--num-classes", "3", "--image-size", "8").exit_code == 0
    path = root / "serve.yaml"
    path.write_text(PIPELINE.format(data=data, run=root / "run"), encoding="utf-8")
    assert build_runner(load_resolved(path), resume=False).run() == 0
    return path


@pytest.fixture(scope="module")
def exported(trained: Path) -> tuple[Path, str]:
    out = trained.parent / "saved"
    result = invoke("export", str(trained), "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, result.stdout


def images(trained: Path) -> list[Path]:
    return sorted((trained.parent / "data" / "eval").glob("*.png"))


def test_export_prints_its_signatures(exported: tuple[Path, str]) -> None:
    out, stdout = exported
    lines = stdout.splitlines()
    assert lines[0].startswith("dslrun: exported ") and lines[0].endswith(f" to {out}")
    assert lines[1:] == [
        "  serving_default(images: float32 [batch, 8, 8, 1], values in [0, 1]) -> classes: int32 [batch], "
        "probabilities: float32 [batch, 3]",
        "  serving_bytes(image_bytes: string [batch], encoded PNG/JPEG/BMP/GIF files of any size and channels, decoded to "
        "8x8x1 in the graph) -> classes: int32 [batch], probabilities: float32 [batch, 3]",
    ]


def test_both_signatures_of_the_reloaded_model_agree_with_the_model_in_memory(trained: Path, exported: tuple[Path, str]) -> None:
    import tensorflow as tf

    from dsl.commands._training import restored_runner
    from dsl.engine.steps import make_predict_call
    from dsl.inputters.pipeline import decode_image
    from dsl.language.pipeline import load_resolved

    files = images(trained)
    encoded = [path.read_bytes() for path in files]  # RGB PNGs, sent to a 1-channel model
    pixels = tf.stack([decode_image(data, (8, 8, 1)) for data in encoded])
    runner = restored_runner(load_resolved(trained), None)
    in_memory = make_predict_call(runner.model, runner.modeler, runner.augmenter.eval)(pixels)

    served = tf.saved_model.load(str(exported[0]))
    from_pixels = served.signatures["serving_default"](images=pixels)
    from_bytes = served.signatures["serving_bytes"](image_bytes=tf.constant(encoded))
    for result in (from_pixels, from_bytes):
        assert result["classes"].numpy().tolist() == in_memory["classes"].numpy().tolist()
        assert result["probabilities"].numpy() == pytest.approx(in_memory["probabilities"].numpy(), abs=1e-6)


def test_a_non_empty_out_is_refused_unless_force_replaces_an_earlier_export(trained: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    result = invoke("export", str(trained), "--out", str(other))
    assert result.exit_code == 1
    assert result.stderr == (f"dslrun: error: --out {other} is not empty (notes.txt); choose another directory, or "
                             "pass --force to replace an earlier export\n")
    result = invoke("export", str(trained), "--out", str(other), "--force")
    assert result.exit_code == 1 and "it is not an earlier export, and --force only replaces one" in result.stderr
    assert (other / "notes.txt").read_text() == "keep me"

    out = tmp_path / "saved"
    assert invoke("export", str(trained), "--out", str(out)).exit_code == 0
    assert invoke("export", str(trained), "--out", str(out)).exit_code == 1
    assert invoke("export", str(trained), "--out", str(out), "--force").exit_code == 0
    assert (out / "saved_model.pb").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "saved"]  # no staging directory left behind


def quiet_env() -> dict[str, str]:
    """The user's environment: nothing asks TensorFlow to be quiet."""
    return {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}


def test_predict_is_quiet_and_agrees_with_the_bytes_signature(trained: Path, exported: tuple[Path, str]) -> None:
    import tensorflow as tf

    files = images(trained)
    result = subprocess.run([sys.executable, "-m", "dsl", "predict", str(trained), *map(str, files)],
                            capture_output=True, text=True, env=quiet_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    for noise in ("oneDNN", "cpu_feature_guard", "This TensorFlow binary"):
        assert noise not in result.stderr, result.stderr
    predicted = [json.loads(line) for line in result.stdout.splitlines()]
    served = tf.saved_model.load(str(exported[0])).signatures["serving_bytes"]
    from_bytes = served(image_bytes=tf.constant([path.read_bytes() for path in files]))
    assert [p["class"] for p in predicted] == from_bytes["classes"].numpy().tolist()


def test_predict_takes_only_the_options_of_the_pipelines_modeler(trained: Path, tmp_path: Path) -> None:
    """`--top` is the classifier's; a detector's `--threshold` or a segmentation's `--color` is refused,
    naming the modelers that take it, before anything is read."""
    image = images(trained)[0]
    for option, value, takers in (("--threshold", "0.3", "object_detection"), ("--color", None, "image_segmentation")):
        result = invoke("predict", str(trained), str(image), option, *([value] if value else []))
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            f"dslrun: error: {option} is an option of the {takers} modeler's predictions; this pipeline's modeler "
            "is image_classification"]
    top = invoke("predict", str(trained), str(image), "--top", "1")
    assert top.exit_code == 0 and len(json.loads(top.stdout.splitlines()[-1])["top"]) == 1


def test_predict_names_a_missing_or_broken_image_in_one_line(trained: Path, tmp_path: Path) -> None:
    missing, broken = tmp_path / "nope.png", tmp_path / "broken.png"
    broken.write_text("not an image")
    result = invoke("predict", str(trained), str(missing), str(broken))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"dslrun: error: cannot read image {missing}: No such file or directory",
        f"dslrun: error: cannot read image {broken}: not a PNG, JPEG, BMP or GIF file",
    ]


def test_predict_reads_the_images_of_a_folder(trained: Path, tmp_path: Path) -> None:
    """Trial B11: `predict pipeline.yaml val/five/` was refused; a folder stands for its image files,
    by name (not its subfolders), and one without any is a one-line error."""
    files = images(trained)
    listed = invoke("predict", str(trained), *map(str, files))
    folder = invoke("predict", str(trained), str(files[0].parent))
    assert listed.exit_code == folder.exit_code == 0, folder.output
    assert folder.stdout == listed.stdout and len(folder.stdout.splitlines()) == len(files)
    (tmp_path / "notes.txt").write_text("no image here")
    empty = invoke("predict", str(trained), str(tmp_path))
    assert empty.exit_code == 1 and empty.stderr.splitlines() == [
        f"dslrun: error: {tmp_path} is a folder with no image file in it (.png, .jpg, .jpeg, .bmp, .gif; subfolders "
        "are not read); name image files, or a folder that holds them"], empty.output


def test_eval_of_a_mode_without_data_says_so_before_reading_a_checkpoint(tmp_path: Path) -> None:
    """It loaded the checkpoint (seconds) before saying there was no test data; the pipeline alone
    says it, and no run directory is needed for that."""
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(data=tmp_path / "nowhere", run=tmp_path / "never-trained"), encoding="utf-8")
    result = invoke("eval", str(path), "--mode", "test")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == "dslrun: error: the inputter has no test data; set inputter.test"
