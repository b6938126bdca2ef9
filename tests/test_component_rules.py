"""`dslrun validate` catches what a component can tell from its parameters and the declared shapes
(dsl.language.rules): each a located error naming both lines and the fix, before any data is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dsl.cli import main

SEGMENTATION = """\
version: 1
name: seg
inputter:
  type: image_segmentation_csv
  train: train.csv
  val: eval.csv
  num_classes: 4
  class_names: [background, disc, square, triangle]
  image_shape: [64, 64, 3]
  batch_size: 8
augmenter: {type: segmentation}
network: {type: unet, depth: 3, base_filters: 8}
modeler: {type: image_segmentation, optimizer: {type: adam, learning_rate: 0.01}}
runner: {max_epochs: 1}
"""

TEXT = """\
version: 1
name: text
inputter:
  type: text_classification_csv
  train: train.csv
  val: eval.csv
  num_classes: 3
  classes: [sports, weather, food]
  sequence_length: 16
  batch_size: 8
network: {type: text_cnn, filter_sizes: [2, 3]}
modeler: {type: text_classification}
runner: {max_epochs: 1}
"""

IMAGES = """\
version: 1
name: images
inputter:
  type: image_classification_csv
  train: train.csv
  val: eval.csv
  num_classes: 3
  classes: [cat, dog, fox]
  image_shape: [16, 16, 3]
  batch_size: 8
network: {type: mlp}
modeler: {type: image_classification}
runner: {max_epochs: 1}
"""


def validate(tmp_path: Path, parent: str, child: str) -> tuple[int, list[str]]:
    (tmp_path / "parent.yaml").write_text(parent, encoding="utf-8")
    (tmp_path / "child.yaml").write_text("version: 1\nname: child\nextends: parent.yaml\n" + child, encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "child.yaml")], catch_exceptions=False)
    return result.exit_code, [line for line in result.output.splitlines() if ": error: " in line]


def test_the_shipped_shapes_are_valid(tmp_path: Path) -> None:
    assert validate(tmp_path, SEGMENTATION, "")[0] == 0
    assert validate(tmp_path, TEXT, "")[0] == 0
    assert validate(tmp_path, IMAGES, "")[0] == 0


@pytest.mark.parametrize(("parent", "child", "at", "names", "words"), [
    (TEXT, "inputter: {num_classes: 4}\n", "parent.yaml:8:inputter.classes:", "child.yaml:4",
     "3 class names for 4 classes"),
    (IMAGES, "inputter: {classes: [cat, dog]}\n", "child.yaml:4:inputter.classes:", "parent.yaml:7",
     "2 class names for 3 classes"),
    (SEGMENTATION, "inputter: {class_names: [a, b]}\n", "child.yaml:4:inputter.class_names:", "parent.yaml:7",
     "set inputter.num_classes: 2"),
    (SEGMENTATION, "modeler: {class_weights: [1, 2, 3]}\n", "child.yaml:4:modeler.class_weights:",
     "parent.yaml:7", "3 class weights for 4 classes"),
    (SEGMENTATION, "inputter: {image_shape: [60, 64, 3]}\n", "parent.yaml:12:network.depth:", "child.yaml:4",
     "must be divisible by 2**3 = 8, but inputter.image_shape"),
    (SEGMENTATION, "augmenter: {crop_size: [36, 32]}\n", "parent.yaml:12:network.depth:", "child.yaml:4", "augmenter.crop_size"),
    (SEGMENTATION, "network: {type: fcn, backbone: InceptionV3}\n", "child.yaml:4:network.backbone:",
     "parent.yaml:9", "InceptionV3 needs images of at least 75x75"),
    (SEGMENTATION, "inputter: {image_shape: [24, 24, 3]}\nnetwork: {type: fcn, backbone: VGG16}\n",
     "child.yaml:5:network.backbone:", "child.yaml:4", "VGG16 needs images of at least 32x32"),
    (SEGMENTATION, "network: {type: fcn}\naugmenter: {crop_size: [32, 32]}\n", "child.yaml:4:network.type:", "child.yaml:5",
     "fcn is built for the inputter's image shape 64x64"),
    (TEXT, "inputter: {sequence_length: 2}\n", "parent.yaml:11:network.filter_sizes[1]:", "child.yaml:4",
     "a filter of 3 tokens is wider than the 2 tokens"),
    (SEGMENTATION, "augmenter: {contrast: [1.2, 0.8]}\n", "child.yaml:4:augmenter.contrast:", "", "lower 1.2 must be below"),
    (SEGMENTATION, "augmenter: {min_scale: 2.0, max_scale: 1.0}\n", "child.yaml:4:augmenter.min_scale:", "",
     "above max_scale"),
    (TEXT, "modeler: {skip_l2_loss_vars: ['(']}\n", "child.yaml:4:modeler.skip_l2_loss_vars[0]:", "",
     "is not a regular expression"),
    (SEGMENTATION, "inputter: {ignore_label: null}\naugmenter: {crop_size: [64, 64], min_scale: 0.5}\n",
     "child.yaml:5:augmenter.min_scale:", "child.yaml:4", "inputter.ignore_label, which is null"),
    (SEGMENTATION, "inputter: {ignore_label: 2}\n", "child.yaml:4:inputter.ignore_label:", "parent.yaml:7",
     "2 is also a class"),
])
def test_a_broken_rule_names_both_lines_and_the_fix(tmp_path: Path, parent: str, child: str, at: str, names: str,
                                                    words: str) -> None:
    code, errors = validate(tmp_path, parent, child)
    assert code == 1
    assert len(errors) == 1, errors
    file, line, path = at.split(":", 2)  # "child.yaml", "4", "network.type:"
    assert f"{file}:{line}:" in errors[0] and f"error: {path}" in errors[0], errors[0]
    assert names in errors[0] and words in errors[0], errors[0]


def test_a_refused_value_from_the_base_file_says_where_to_change_it(tmp_path: Path) -> None:
    """Trial A12 set num_classes in its own file; the error stood at the base's `classes` line and said
    only "set num_classes back". It now says that the list is inherited, and where to set it."""
    code, errors = validate(tmp_path, TEXT, "inputter: {num_classes: 4}\n")
    assert code == 1 and errors[0].endswith(
        f"; inputter.classes comes from {tmp_path / 'parent.yaml'}, which {tmp_path / 'child.yaml'} extends: set it "
        f"in {tmp_path / 'child.yaml'} to change it"), errors
    code, errors = validate(tmp_path, IMAGES, "inputter: {classes: [cat, dog]}\n")  # written here: nothing to add
    assert code == 1 and "comes from" not in errors[0], errors


@pytest.mark.parametrize("parent", [TEXT, IMAGES])
def test_num_classes_left_out_is_the_number_of_classes_listed(tmp_path: Path, parent: str) -> None:
    """`classes` says how many there are: num_classes may be left out (trial B9 had to write both)."""
    (tmp_path / "p.yaml").write_text(parent.replace("  num_classes: 3\n", ""), encoding="utf-8")
    result = CliRunner().invoke(main, ["show", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "  num_classes: 3\n" in result.output


def test_a_folder_inputter_s_num_classes_left_out_is_its_class_folders(tmp_path: Path) -> None:
    """Trial B14: image_folder with `classes: null` still asked for num_classes. Left out, it is the
    number of the train folder's sub-folders (the stored pipeline says it); text_folder likewise."""
    for name in ("cat", "dog", "fox", "owl"):
        (tmp_path / "train" / name).mkdir(parents=True)
    for kind, shape, net, modeler in (("image_folder", "  image_shape: [8, 8, 3]\n", "mlp", "image_classification"),
                                      ("text_folder", "", "text_cnn", "text_classification")):
        (tmp_path / "p.yaml").write_text(f"version: 1\ninputter:\n  type: {kind}\n  train: {tmp_path / 'train'}\n"
                                         f"{shape}network: {{type: {net}}}\nmodeler: {{type: {modeler}}}\nrunner: {{max_epochs: 1}}\n",
                                         encoding="utf-8")
        result = CliRunner().invoke(main, ["show", str(tmp_path / "p.yaml")], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        inputter = yaml.safe_load(result.output)["inputter"]
        assert inputter["num_classes"] == 4 and list(inputter).index("num_classes") == 4, inputter  # in schema order
    (tmp_path / "p.yaml").write_text(f"version: 1\ninputter:\n  type: image_folder\n  train: {tmp_path / 'nowhere'}\n"
                                     "network: {type: mlp}\nmodeler: {type: image_classification}\nrunner: {max_epochs: 1}\n",
                                     encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 0 and "nowhere does not exist yet" in result.output, result.output  # counted when made


def test_num_classes_is_required_when_no_classes_are_listed(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(IMAGES.replace("  num_classes: 3\n", "").replace("  classes: [cat, dog, fox]\n", ""),
                                     encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 1
    assert "p.yaml:3:1: error: inputter.num_classes: missing required key `num_classes`" in result.output
    assert "Required unless `classes` lists them" in result.output
