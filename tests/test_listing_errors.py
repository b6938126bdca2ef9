"""Listings a new user gets wrong: a headerless CSV whose first row has a bad label, a directory
where an image is expected. Each is one located line and exit 1, at validate --data and at run."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e_support import dslrun, synthetic_data

PIPELINE = """\
version: 1
name: tiny
inputter:
  type: image_classification_csv
  train: {train}
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [8, 8, 3]
  batch_size: 8
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
runner: {{max_epochs: 1, model_dir: {run}}}
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_data(tmp_path_factory.mktemp("data") / "synthetic", 32, 16, 8)


def pipeline(tmp_path: Path, data: Path, rows: list[str]) -> Path:
    listing = tmp_path / "train.csv"
    listing.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    path = tmp_path / "tiny.yaml"
    path.write_text(PIPELINE.format(train=listing, data=data, run=tmp_path / "run"), encoding="utf-8")
    return path


def data_rows(data: Path) -> list[str]:
    rows = (data / "train.csv").read_text(encoding="utf-8").splitlines()[1:]  # without its header
    return [row.replace("train/", f"{data}/train/", 1) for row in rows]


def test_a_headerless_csv_with_a_bad_first_label_is_no_header(tmp_path: Path, data: Path) -> None:
    rows = data_rows(data)
    rows[0] = rows[0].rsplit(",", 1)[0] + ",cat"
    path = pipeline(tmp_path, data, rows)
    for args in (["validate", "--data", str(path)], [str(path)]):
        result = dslrun(*args, check=False)
        assert result.returncode == 1, result.stdout + result.stderr
        located = [line for line in (result.stdout + result.stderr).splitlines() if "label 'cat' is not an integer" in line]
        assert len(located) == 1, result.stdout + result.stderr
        assert f"{tmp_path / 'train.csv'}:1:" in located[0] or f"{tmp_path / 'train.csv'} line 1:" in located[0]
        assert "Traceback" not in result.stderr


def test_a_header_row_is_still_skipped(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data, ["path,label", *data_rows(data)])
    result = dslrun("validate", "--data", str(path))
    assert "32 examples" in result.stdout


@pytest.mark.slow
def test_a_directory_where_an_image_is_expected_is_one_located_line(tmp_path: Path, data: Path) -> None:
    (tmp_path / "folder.png").mkdir()
    path = pipeline(tmp_path, data, [*data_rows(data)[:-1], f"{tmp_path / 'folder.png'},1"])
    result = dslrun(str(path), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"dslrun: error: cannot read image {tmp_path / 'folder.png'} (listed in {tmp_path / 'train.csv'} line 32, "
        "inputter.train): Is a directory; fix the listing or the file")
    assert "Graph execution error" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("inputter", "generator"), [
    ("{type: image_classification_csv, train: nowhere.csv, num_classes: 4}", "synthetic"),
    ("{type: image_segmentation_csv, train: nowhere.csv, num_classes: 4}", "synthetic-segmentation"),
    ("{type: text_classification_csv, train: nowhere.csv, num_classes: 4}", "synthetic-text"),
])
def test_the_missing_data_hint_names_the_generator_of_the_task(tmp_path: Path, inputter: str, generator: str) -> None:
    network, modeler = ("text_cnn", "text_classification") if "text" in inputter else (
        ("unet", "image_segmentation") if "segmentation" in inputter else ("mlp", "image_classification"))
    path = tmp_path / "p.yaml"
    path.write_text(f"version: 1\ninputter: {inputter}\nnetwork: {{type: {network}}}\nmodeler: {{type: {modeler}}}\n"
                    "runner: {max_epochs: 1, workflow: [[train, 1]]}\n", encoding="utf-8")
    result = dslrun("validate", "--data", str(path), check=False)
    assert result.returncode == 1
    assert f"create the data, e.g. with `dslrun data {generator} --out DIR`" in result.stdout, result.stdout


def test_segmentation_data_is_summed_up_per_pixel(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    rows = []
    for index in range(4):
        mask = np.zeros((16, 16), np.uint8)
        mask[0, index] = 1  # one pixel of class 1 per image: 4 of 1024
        Image.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(tmp_path / f"{index}.png")
        Image.fromarray(mask, mode="L").save(tmp_path / f"{index}_mask.png")
        rows.append(f"{index}.png,{index}_mask.png")
    (tmp_path / "train.csv").write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    path = tmp_path / "seg.yaml"
    path.write_text("version: 1\ninputter: {type: image_segmentation_csv, train: " + str(tmp_path / "train.csv")
                    + ", num_classes: 2, class_names: [background, speck], image_shape: [16, 16, 3], batch_size: 2}\n"
                    "network: {type: unet, depth: 2, base_filters: 4}\nmodeler: {type: image_segmentation}\n"
                    "runner: {max_epochs: 1, workflow: [[train, 1]]}\n", encoding="utf-8")
    result = dslrun("validate", "--data", str(path))
    assert "pixels per class: 0 (background) 99.6%, 1 (speck) 0.4%" in result.stdout, result.stdout
    warning = [line for line in result.stdout.splitlines() if "warning:" in line]
    assert len(warning) == 1 and "pixels are heavily imbalanced" in warning[0] and "255x fewer" in warning[0]
    assert "modeler.class_weights" in warning[0]
