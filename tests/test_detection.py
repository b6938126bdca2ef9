"""Object detection from YAML alone: the generated set in both layouts, the inputters' located
errors, padded batches, anchors and matching, the gathered COCO mAP, validate's rules and
box statistics, and train / eval / predict / export through the real CLI on data made by
`dslrun data synthetic-detection`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

tf = pytest.importorskip("tensorflow")
pytest.importorskip("pycocotools")
from PIL import Image

from dsl.engine.metric_reduction import reduced_results
from dsl.language.context import Placement
from dsl.language.errors import DslError
from dsl.tasks.object_detection._box_listing import read_sources
from dsl.tasks.object_detection._synthetic_data import DetectionSpec, write

from e2e_support import DSLRUN, ENV, assert_identical, sigkill_when

PIPELINE = Path(__file__).resolve().parents[1] / "pipelines" / "detection.yaml"
SMALL = ["runner.max_epochs=7", "inputter.batch_size=16"]


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("boxes")
    write(out, DetectionSpec(num_train=160, num_val=32, image_size=64, seed=3))
    return out


def params(source: Path, **more: Any) -> dict[str, Any]:
    return {"train": str(source), "num_classes": 3, "classes": ["disc", "square", "triangle"], "max_boxes": 5,
            "image_shape": [64, 64, 3], "batch_size": 4, "shuffle_buffer": 0, "image_dir": None, **more}


def box_csv(tmp_path: Path, *rows: str) -> Path:
    Image.fromarray(np.zeros((40, 50, 3), np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "boxes.csv").write_text("\n".join(["image_path,x_min,y_min,x_max,y_max,label", *rows]) + "\n")
    return tmp_path / "boxes.csv"


# ------------------------------------------------------------------------------ data and inputters
def test_both_layouts_list_the_same_images_and_boxes(boxes: Path) -> None:
    from_csv = read_sources(params(boxes / "train.csv"), "csv")["train"]
    from_coco = read_sources(params(boxes / "train.json"), "coco")["train"]
    assert len(from_csv) == len(from_coco) == 160
    for a, b in zip(from_csv, from_coco):
        assert a.path == b.path and a.labels == b.labels and a.size == (64, 64)
        np.testing.assert_allclose(a.boxes, b.boxes)
        assert all(0 <= v <= 1 for box in a.boxes for v in box) and 1 <= len(a.boxes) <= 3


@pytest.mark.parametrize(("row", "match"), [
    ("a.png,10,5,10,20,disc", r"boxes.csv line 2: box \(10, 5, 10, 20\) has min >= max; expected x_min < x_max "
                              r"and y_min < y_max \(if the columns are x, y, width, height, write x_max = x \+ width "
                              r"and y_max = y \+ height: 20, 25\)"),
    ("a.png,30,30,20,20,disc", r"box \(30, 30, 20, 20\) has min >= max; expected x_min < x_max and y_min < y_max$"),
    ("a.png,10,5,60,20,disc", r"boxes.csv line 2: box .* reaches outside its 50x40 image"),
    ("a.png,1,1,5,5,hexagon", r"boxes.csv line 2: unknown label 'hexagon'; expected one of disc, square, triangle"),
    ("a.png,1,1,5,5,Square", r"boxes.csv line 2: unknown label 'Square'; expected one of disc, square, triangle; "
                             r"did you mean 'square'\?"),  # trial A8
    ("a.png,1,1,5,5,7", r"boxes.csv line 2: label 7 is outside 0..2"),
    ("a.png,1,x,5,5,disc", r"boxes.csv line 2: box coordinates 1,x,5,5 are not all numbers"),
    ("b.png,1,1,5,5,disc", r"boxes.csv line 2: image .*b.png does not exist"),
])
def test_a_bad_csv_row_is_named_with_its_file_and_line(tmp_path: Path, row: str, match: str) -> None:
    with pytest.raises(DslError, match=match):
        read_sources(params(box_csv(tmp_path, row)), "csv")


def test_a_header_of_other_column_names_is_a_header_and_a_first_data_row_is_not(tmp_path: Path) -> None:
    """`filename,xmin,ymin,xmax,ymax,class` was read as a box of an image named "filename" (a trial:
    `image .../filename does not exist`); a header is read by its names; the first row of an image
    without boxes stays a row."""
    path = box_csv(tmp_path, "a.png,1,1,5,5,disc")
    path.write_text(path.read_text().replace("image_path,x_min,y_min,x_max,y_max,label", "filename,xmin,ymin,xmax,ymax,class"))
    listed = read_sources(params(path), "csv")["train"]
    assert len(listed) == 1 and listed[0].labels == [0]
    # Read by its names: y first in the header is y first in the rows (a trial's boxes came out
    # transposed, mAP 0.001, when the names were taken for the shipped order).
    path.write_text("filename,ymin,xmin,ymax,xmax,class\na.png,1,2,5,9,disc\n")
    by_name = read_sources(params(path), "csv")["train"][0]
    path.write_text("a.png,2,1,9,5,disc\n")
    assert by_name.boxes == read_sources(params(path), "csv")["train"][0].boxes
    path.write_text("image_path,y_min,x_min,y_max,width,label\na.png,1,2,5,9,disc\n")
    with pytest.raises(DslError, match=r"boxes.csv line 1: header column 5 'width' names none of them"):
        read_sources(params(path), "csv")
    path.write_text("a.png,,,,,\n")
    assert read_sources(params(path), "csv")["train"][0].boxes == []
    path.write_text("a.png,1,x,5,5,disc\n")  # one word among numbers: a bad row, not a header
    with pytest.raises(DslError, match=r"boxes.csv line 1: box coordinates 1,x,5,5 are not all numbers"):
        read_sources(params(path), "csv")


def test_an_image_without_boxes_and_too_many_boxes(tmp_path: Path) -> None:
    listed = read_sources(params(box_csv(tmp_path, "a.png,,,,,")), "csv")["train"]
    assert len(listed) == 1 and listed[0].boxes == []
    with pytest.raises(DslError, match=r"line 3: the image of this row has more than inputter.max_boxes \(1\)"):
        read_sources(params(box_csv(tmp_path, "a.png,1,1,5,5,0", "a.png,2,2,6,6,1"), max_boxes=1), "csv")


def test_boxes_written_as_fractions_of_the_image_are_an_error_at_the_split(tmp_path: Path) -> None:
    """Trial A16: x_min .. y_max as fractions (0.55, 0.57, 0.79, 0.81) trained to mAP 0 with exit 0; only the
    anchors were said not to fit. One box of a pixel or more among them is taken as meant."""
    path = box_csv(tmp_path, "a.png,0.1,0.2,0.5,0.6,disc", "a.png,0.3,0.3,0.9,1.0,square")
    with pytest.raises(DslError, match=r"inputter.train: every box of .*boxes.csv ends within the image's first pixel "
                                       r"\(no coordinate above 1\): boxes are written in pixels, not as fractions"):
        read_sources(params(path), "csv")
    assert len(read_sources(params(box_csv(tmp_path, "a.png,0.1,0.2,0.5,0.6,disc", "a.png,1,1,5,5,square")), "csv")["train"]) == 1


def test_a_bad_coco_annotation_is_named_by_its_id_and_crowds_are_left_out(boxes: Path, tmp_path: Path) -> None:
    data = json.loads((boxes / "eval.json").read_text())
    data["annotations"][0]["iscrowd"] = 1
    data["annotations"][1]["bbox"] = [60, 60, 10, 10]
    (tmp_path / "eval.json").write_text(json.dumps(data))
    spec = params(tmp_path / "eval.json", image_dir=str(boxes))
    with pytest.raises(DslError, match=r"eval.json: annotation id 2: box \(60, 60, 70, 70\) reaches outside"):
        read_sources(spec, "coco")
    data["annotations"][1]["bbox"] = [1, 1, 5, 5]
    (tmp_path / "eval.json").write_text(json.dumps(data))
    listed = read_sources(spec, "coco")["train"]
    assert listed[0].crowd == 1 and sum(len(i.boxes) for i in listed) == len(data["annotations"]) - 1


def test_coco_classes_in_another_order_or_a_count_apart_are_errors_at_their_keys(boxes: Path, tmp_path: Path) -> None:
    """Trial A7: `classes` naming the file's categories in another order than their ids was taken in
    silence (every prediction and per-class AP then carries another category's name). Both errors
    start with the pipeline key, so a run locates them at its line (and `validate --data` too)."""
    with pytest.raises(DslError, match=r"^inputter.classes: classes lists 'square' as class 0, but in the file it is "
                                       r"class 1 \(the categories in id order are disc, square, triangle\), so every box "
                                       r"would be relabelled; list the classes in that order"):
        read_sources(params(boxes / "train.json", classes=["square", "disc", "triangle"]), "coco")
    with pytest.raises(DslError, match=r"^inputter.classes: 'tri' \(class 2\) is not a category of the file, whose "
                                       r"category 2 \(by id\) is 'triangle', though the other names are the file's"):
        read_sources(params(boxes / "train.json", classes=["disc", "square", "tri"]), "coco")  # trial A8: silent
    renamed = read_sources(params(boxes / "train.json", classes=["round", "box", "tri"]), "coco")["train"]
    assert len(renamed) == 160  # other names altogether: a renaming, taken
    with pytest.raises(DslError, match=r"^inputter.num_classes: 4, but .*train.json has 3 categories; make them agree"):
        read_sources(params(boxes / "train.json", num_classes=4, classes=None), "coco")
    from click.testing import CliRunner

    from dsl.cli import main

    # Without classes, the per-class AP a run logs carries the categories' names, and validate knows them.
    coco = f"inputter={{type: coco_json, train: {boxes / 'train.json'}, val: {boxes / 'eval.json'}, num_classes: 3}}"
    monitor = ["--set", "callbacks=!append [{type: early_stopping, monitor: val/ap_square, mode: max}]"]
    result = CliRunner().invoke(main, ["validate", str(PIPELINE), "--set", coco, *monitor], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["validate", str(PIPELINE), "--set", coco, *monitor[:1],
                                       monitor[1].replace("ap_square", "ap_1")], catch_exceptions=False)
    assert result.exit_code == 1 and "did you mean 'val/ap_square'?" in result.output, result.output  # class 1 (A9)
    result = CliRunner().invoke(main, ["validate", str(PIPELINE), "--data", "--set",
                                       f"inputter={{type: coco_json, train: {boxes / 'train.json'}, val: {boxes / 'eval.json'}, num_classes: 3, "
                                       "classes: [square, disc, triangle]}"], catch_exceptions=False)
    assert result.exit_code == 1
    assert "<--set>:1:" in result.output and "error: inputter.classes: classes lists 'square' as class 0" in result.output, \
        result.output
    assert result.output.count("classes lists 'square' as class 0") == 1, result.output  # not once per split (A13)
    assert f"names in {boxes / 'train.json'} and {boxes / 'eval.json'}" in result.output, result.output
    # A count apart: the summary says the file's count beside the declared one (trial A9 read "3 classes" alone).
    result = CliRunner().invoke(main, ["validate", str(PIPELINE), "--data", "--set",
                                       f"inputter={{type: coco_json, train: {boxes / 'train.json'}, val: {boxes / 'eval.json'}, "
                                       "num_classes: 4}"], catch_exceptions=False)
    assert result.exit_code == 1 and "has 3 categories; make them agree" in result.output, result.output
    assert "3 classes (inputter.num_classes is 4)" in result.output, result.output


def test_batches_hold_boxes_padded_to_max_boxes_with_their_count(boxes: Path) -> None:
    from dsl.tasks.object_detection.object_detection_csv import build

    inputter = build(params(boxes / "train.csv"), None)
    assert inputter.facts()["max_boxes"] == 5 and inputter.facts()["class_names"] == ["disc", "square", "triangle"]
    images, targets = next(iter(inputter.dataset("train")))
    assert images.shape == (4, 64, 64, 3) and targets["boxes"].shape == (4, 5, 4)
    count = targets["count"].numpy()
    classes = targets["classes"].numpy()
    assert all((classes[i, count[i]:] == -1).all() and (classes[i, :count[i]] >= 0).all() for i in range(4))


# ------------------------------------------------------------------------------ anchors, loss, metric
def test_anchors_cover_every_level_in_the_heads_order_and_matching_finds_the_box() -> None:
    from dsl.tasks.object_detection._anchors import anchor_boxes
    from dsl.tasks.object_detection._box_coding import decode, encode, match

    anchors = anchor_boxes({"levels": [3, 4], "sizes": [12, 24], "scales": [1.0, 1.5], "ratios": [1.0]}, (64, 64))
    assert anchors.shape == ((8 * 8 + 4 * 4) * 2, 4)
    np.testing.assert_allclose(anchors[0] * 64, [-2, -2, 10, 10])  # level 3, cell (0, 0), scale 1
    truth = {"boxes": tf.constant([[anchors[54], [0, 0, 0, 0]]]), "classes": tf.constant([[2, -1]]),
             "count": tf.constant([1])}
    matched, labels, positive = match(truth, tf.constant(anchors), 0.5, 0.4)
    assert bool(positive[0, 54]) and int(labels[0, 54]) == 2 and int(tf.reduce_sum(tf.cast(positive, tf.int32))) >= 1
    assert int(labels[0, 150]) == -1  # far away: background
    np.testing.assert_allclose(decode(encode(matched, anchors), anchors)[0, 54], anchors[54], atol=1e-6)


def test_gathered_map_of_two_ranks_is_that_of_one_process() -> None:
    from dsl.tasks.object_detection._coco_metrics import CocoMap, coco_stats, detection_metrics

    rng = np.random.default_rng(0)

    def record(good: bool) -> tuple[np.ndarray, ...]:
        box = np.sort(rng.uniform(0, 1, (1, 4)).reshape(2, 2), axis=0).T.reshape(1, 4)[:, [0, 2, 1, 3]]
        found = box if good else np.clip(box + 0.15, 0, 1)
        return box, np.array([0]), found, np.array([rng.uniform(0.5, 1)]), np.array([0])

    records = [record(i % 3 != 0) for i in range(12)]
    one_process = coco_stats(records, 2, (64, 64))
    ranks = [detection_metrics(np.zeros((1, 4), np.float32), {}, 2, (64, 64)) for _ in range(2)]
    for metrics, part in zip(ranks, (records[:7], records[7:])):
        owner = metrics["map"]
        assert isinstance(owner, CocoMap)
        owner.records = list(part)

    class TwoRanks:
        placement = Placement(rank=0, world_size=2)

        def sum_across_ranks(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
            return arrays

        def gather_objects(self, value: Any) -> list[Any]:
            return [value, ranks[1]["map"].local_results() if value is not None else None]

    reduced = reduced_results(ranks[0], TwoRanks())
    assert reduced["map"] == pytest.approx(one_process[0]) and reduced["map_50"] == pytest.approx(one_process[1])
    assert 0 < one_process[0] < 1 and reduced["ap_1"] == 0.0  # class 1 has no true box
    assert float(ranks[0]["map"].result()) == pytest.approx(coco_stats(records[:7], 2, (64, 64))[0])


def test_the_coco_evaluation_runs_as_plain_python_inside_a_compiled_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The val step reads mAP in a tf.function, whose AutoGraph used to convert pycocotools'
    evaluation (called from a lambda) and run it as converted code: the val phase took 30 times
    a train step. The evaluation must be reached through plain Python only."""
    import inspect

    from dsl.tasks.object_detection import _coco_metrics

    converted = []  # per evaluation, the frames of AutoGraph's generated code on the way to it

    def spy(records: list[Any], num_classes: int, image_shape: tuple[int, ...]) -> np.ndarray:
        converted.append([frame.filename for frame in inspect.stack() if "autograph_generated" in frame.filename])
        return np.zeros(3 + num_classes)

    monkeypatch.setattr(_coco_metrics, "coco_stats", spy)
    metrics = _coco_metrics.detection_metrics(None, {}, 2, (64, 64))

    @tf.function
    def results() -> list[tf.Tensor]:
        return [metric.result() for metric in metrics.values()]

    results()
    assert converted == [[]]  # once for the owner (the views read its cache), through no converted code


# ------------------------------------------------------------------------------ validate
def validate(tmp_path: Path, boxes: Path, *sets: str) -> subprocess.CompletedProcess:
    args = [arg for setting in sets for arg in ("--set", setting)]
    return subprocess.run([*DSLRUN, "validate", str(PIPELINE), *args], capture_output=True, text=True,
                          env={**ENV, "DATA_DIR": str(boxes)}, timeout=120)


@pytest.mark.parametrize(("sets", "match"), [
    (["network.anchors.sizes=[12, 96]"], r"network.anchors.sizes: anchors up to .* larger than the 64x64 images"),
    (["network.anchors.sizes=[12]"], r"network.anchors.sizes: 1 sizes for 2 levels"),
    (["network.backbone=MobileNetV2", "network.anchors.levels=[3, 6]"], r"level 6 .* deeper than the MobileNetV2"),
    (["network.head=ssd_lite", "network.anchors.sizes=[12, 96]"], r"network.anchors.sizes: anchors up to .* larger"),
    (["network.head=ssdlite"], r"network.head: .*ssd_lite"),
    (["inputter.classes=[disc, square]"], r"inputter.classes: 2 class names for 3 classes"),
    (["modeler={type: image_classification}"], r"modeler 'image_classification' works on"),
    (["network={type: resnet_cifar}"], r"network 'resnet_cifar' works on"),
    (["callbacks[4].save_best.monitor=val/map50"], r"no output 'map50'; did you mean 'val/map_50'"),
])
def test_validate_refuses_what_the_pipeline_alone_gets_wrong(tmp_path: Path, boxes: Path, sets: list[str],
                                                             match: str) -> None:
    result = validate(tmp_path, boxes, *sets)
    assert result.returncode == 1, result.stdout + result.stderr
    assert any(__import__("re").search(match, line) for line in result.stdout.splitlines()), result.stdout


def test_validate_data_warns_at_the_anchors_when_the_boxes_match_none(boxes: Path) -> None:
    """Images fed larger (or smaller) than written scale their boxes, not the anchors: boxes no
    anchor matches are a warning located at network.anchors, not a clause at the end of a summary."""
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data", "--set", "network.anchors.sizes=[40, 56]",
                             "--set", "inputter.image_shape=[96, 96, 3]"], capture_output=True, text=True,
                            env={**ENV, "DATA_DIR": str(boxes)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in result.stdout.splitlines() if ": warning: network.anchors: " in line]
    # Located at the anchors mapping (its first entry, the line below `anchors:`).
    at = PIPELINE.read_text().splitlines().index("  anchors:") + 2
    assert [line.split(": warning: ")[0] for line in warnings] == [f"{PIPELINE}:{at}:5"] * 2, result.stdout  # train, val
    assert "match no anchor well at 96x96" in warnings[0] and "smaller than half the smallest anchor, 40 px" in warnings[0]


def test_a_run_s_start_warns_when_no_anchor_fits_the_train_boxes(boxes: Path, capsys: pytest.CaptureFixture) -> None:
    """Trial A14: 4-6 px anchors on 16-40 px digits trained to mAP 0.03 and exited 0; only `validate
    --data` said why. The inputter reports its train boxes' sides, the modeler holds them against its
    anchors when it is built (a run, eval), and says so once, on the chief."""
    from dsl.language.context import BuildContext
    from dsl.tasks.object_detection.modeler import ObjectDetectionModeler
    from dsl.tasks.object_detection.object_detection_csv import build

    inputter = build(params(boxes / "train.csv", image_shape=[96, 96, 3]), None)
    sides = inputter.facts()["train_box_sides"]
    assert len(sides) == sum(len(image.boxes) for image in inputter.listings["train"]) and min(sides) > 0
    for sizes, warned in (([40, 56], True), ([8, 16, 32], False)):
        context = BuildContext(image_shape=(96, 96, 3), num_classes=3)
        context.learn({**inputter.facts(), "anchors": {"levels": [3, 4], "sizes": sizes, "scales": [1.0],
                                                       "ratios": [1.0]}})
        ObjectDetectionModeler({}, context)
        err = capsys.readouterr().err
        assert ("dslrun: warning: network.anchors: " in err and "train boxes match no anchor well at 96x96" in err
                and f"smaller than half the smallest anchor, {sizes[0]} px" in err) == warned, err
    context = BuildContext(image_shape=(96, 96, 3), num_classes=3, placement=Placement(rank=1, world_size=2))
    context.learn({**inputter.facts(), "anchors": {"levels": [3, 4], "sizes": [40, 56], "scales": [1.0], "ratios": [1.0]}})
    ObjectDetectionModeler({}, context)
    assert capsys.readouterr().err == ""  # the chief says it, once


def test_validate_data_sums_up_the_boxes_and_locates_a_bad_row(tmp_path: Path, boxes: Path) -> None:
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data"], capture_output=True, text=True,
                            env={**ENV, "DATA_DIR": str(boxes)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "boxes, 1-3 per image" in result.stdout and "per class: disc" in result.stdout
    assert "anchors 12-36 px" in result.stdout
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("train", "eval"):
        (bad / f"{name}.csv").write_text((boxes / f"{name}.csv").read_text().replace(
            "train/", str(boxes / "train") + "/").replace("eval/", str(boxes / "eval") + "/"))
    lines = (bad / "train.csv").read_text().splitlines()
    for row in (3, 6, 9):  # the same mistake in 3 rows: shown at the first, with how many more (trial A11)
        lines[row] = lines[row].rsplit(",", 1)[0] + ",hexagon"
    (bad / "train.csv").write_text("\n".join(lines) + "\n")
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data"], capture_output=True, text=True,
                            env={**ENV, "DATA_DIR": str(bad)}, timeout=120)
    assert result.returncode == 1
    errors = [line for line in result.stdout.splitlines() if "hexagon" in line]
    assert len(errors) == 1 and errors[0].startswith(f"{bad / 'train.csv'}:4:1: error: inputter.train: unknown label "
                                                     "'hexagon'") and errors[0].endswith(" (2 more like it in this split)"), errors
    # Too many boxes for max_boxes: once per split with a count, not a line per image (trial A16: 42 lines).
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data", "--set", "inputter.max_boxes=1"],
                            capture_output=True, text=True, env={**ENV, "DATA_DIR": str(boxes)}, timeout=120)
    errors = [line for line in result.stdout.splitlines() if "max_boxes" in line]
    assert result.returncode == 1 and len(errors) == 2, result.stdout
    assert "error: inputter.train: the image of this row has more than inputter.max_boxes (1) boxes; raise max_boxes (" \
        in errors[0] and errors[0].endswith("more like it in this split)"), errors
    # An image a COCO file names is missing: detection's inputters have no skip_corrupt, so the
    # error does not suggest it (it did, and the setting was then refused).
    coco = tmp_path / "coco"
    shutil.copytree(boxes, coco)
    (coco / "train" / "images" / "00002.png").unlink()
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data", "--set",
                             f"inputter={{type: coco_json, train: {coco / 'train.json'}, val: {coco / 'eval.json'}, "
                             "num_classes: 3}"], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 1
    assert f"{coco / 'train.json'}:1:1: error: inputter.train: image {coco / 'train' / 'images' / '00002.png'}: No such " \
           "file or directory; fix or remove it" in result.stdout.splitlines(), result.stdout


def test_boxes_written_as_width_and_height_get_a_hint_and_leave_the_class_counts_alone(tmp_path: Path,
                                                                                         boxes: Path) -> None:
    """Trial A10 wrote COCO's x, y, width, height under x_max, y_max: 256 lines of `min >= max` and no
    hint, beside an imbalance warning that counted each image whose boxes were all refused as class 0."""
    rows = (boxes / "eval.csv").read_text().splitlines()
    converted = [rows[0]]
    for row in rows[1:]:
        path, x_min, y_min, x_max, y_max, label = row.split(",")
        width, height = float(x_max) - float(x_min), float(y_max) - float(y_min)
        converted.append(",".join([str(boxes / path), x_min, y_min, f"{width:g}", f"{height:g}", label]))
    (tmp_path / "eval.csv").write_text("\n".join(converted) + "\n")
    result = subprocess.run([*DSLRUN, "validate", str(PIPELINE), "--data", "--set", f"inputter.val={tmp_path / 'eval.csv'}"],
                            capture_output=True, text=True, env={**ENV, "DATA_DIR": str(boxes)}, timeout=120)
    assert result.returncode == 1
    refused = [line for line in result.stdout.splitlines() if "has min >= max" in line]
    assert refused and all("(if the columns are x, y, width, height, write x_max = x + width and y_max = y + height: "
                           in line for line in refused), result.stdout
    assert not [line for line in result.stdout.splitlines() if "inputter.val: the classes are heavily imbalanced" in line], \
        result.stdout


# ------------------------------------------------------------------------------ the shipped pipeline
def run_cli(boxes: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env={**ENV, "DATA_DIR": str(boxes)},
                            timeout=600)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr[-3000:]}"
    return result


def sets(run: Path, *more: str) -> list[str]:
    return [arg for setting in [*SMALL, f"runner.model_dir={run}", *more] for arg in ("--set", setting)]


@pytest.fixture(scope="module")
def trained(boxes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    result = run_cli(boxes, str(PIPELINE), *sets(run))
    # Trial A14: eval and predict looked in the pipeline's own run directory; the run says how to reach this one.
    assert f"dslrun: run directory: {run} (set with --set: give eval, predict and export the same --set " \
           f"runner.model_dir={run})" in result.stdout, result.stdout[-2000:]
    assert "network.anchors" not in result.stderr  # the shipped anchors fit the generated boxes
    return run


@pytest.mark.slow
def test_the_shipped_pipeline_learns_and_eval_agrees(boxes: Path, trained: Path) -> None:
    val = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    val = [record for record in val if record.get("mode") == "val"]
    # Untrained, the heads score every anchor at the prior 0.01, below score_threshold: mAP 0.
    # Measured: 0.03 after the first epoch, 0.30 after the seventh (seed 5).
    assert val[-1]["map_50"] > 0.15 and val[-1]["map_50"] > val[0]["map_50"] + 0.1, val
    assert val[-1]["map_50"] >= val[-1]["map_75"] and {"ap_disc", "ap_square", "ap_triangle", "class_loss", "box_loss"} <= set(val[-1])
    evaluated = json.loads(run_cli(boxes, "eval", str(PIPELINE), *sets(trained)).stdout.splitlines()[-1])
    assert evaluated["map"] == pytest.approx(val[-1]["map"], abs=1e-6)
    assert evaluated["map_50"] == pytest.approx(val[-1]["map_50"], abs=1e-6)
    # The val loss is the whole set's summed loss over its positive anchors, whatever the batches:
    # a trial's 2-rank run (8 a rank) and a 1-process eval (16) of one checkpoint differed by 0.4 %.
    cut = json.loads(run_cli(boxes, "eval", str(PIPELINE), *sets(trained, "inputter.batch_size=5")).stdout.splitlines()[-1])
    for name in ("loss", "class_loss", "box_loss"):
        assert cut[name] == pytest.approx(evaluated[name], rel=1e-5), (name, cut, evaluated)
    assert cut["map"] == pytest.approx(evaluated["map"], abs=1e-6)


def _iou(a: list[float], b: list[float]) -> float:
    """IoU of two [x_min, y_min, x_max, y_max] boxes, written here again to check predict's."""
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_one_box_per_object_keeps_the_best_class_and_separate_objects() -> None:
    from dsl.tasks.object_detection._box_records import one_per_object

    found = [{"class": "a", "score": 0.4, "box": [0, 0, 10, 10]},
             {"class": "b", "score": 0.9, "box": [1, 0, 11, 10]},   # the same object, better: kept
             {"class": "a", "score": 0.3, "box": [20, 20, 30, 30]},  # another object: kept
             {"class": "c", "score": 0.2, "box": [5, 0, 15, 10]}]    # IoU 0.43 with b: kept at 0.5
    assert [d["class"] for d in one_per_object(found, 0.5)] == ["b", "a", "c"]
    assert [d["class"] for d in one_per_object(found, 0.3)] == ["b", "a"]


def test_an_overlay_labels_each_box_on_a_patch_of_its_colour_readable_on_a_dark_image(tmp_path: Path) -> None:
    """The second trial could not read navy labels on black digits: a label is now drawn on a filled
    patch of the box's bright colour, in black or white ink, above the box where it fits."""
    from dsl.tasks.object_detection._box_records import _overlay, box_colour

    picture = Image.new("RGB", (96, 96))  # black, as the digit scenes
    found = [{"class": "eight", "label": 8, "score": 0.42, "box": [30.0, 40.0, 60.0, 70.0]},
             {"class": "one", "label": 1, "score": 0.91, "box": [2.0, 1.0, 20.0, 30.0]}]  # no room above: inside
    path = _overlay(picture, found, {"image": "scene.png"}, {"out": str(tmp_path)})
    drawn = np.asarray(Image.open(path).convert("RGB"))
    assert drawn.shape == (384, 384, 3)
    for detection, rows in ((found[0], slice(40 * 4 - 10, 40 * 4)), (found[1], slice(1 * 4 + 3, 1 * 4 + 10))):
        colour = np.array(box_colour(detection["label"]))
        assert colour.max() == 255 and colour.sum() > 300  # bright on black
        x = int(detection["box"][0] * 4)
        patch = drawn[rows, x + 1:x + 30]
        # The box's colour (the patch) around the ink, where the black image was.
        ink = np.array((0, 0, 0) if colour @ (0.2126, 0.7152, 0.0722) > 140 else (255, 255, 255))
        assert (patch == colour).all(axis=-1).mean() > 0.3 and (patch == ink).all(axis=-1).mean() > 0.05
    assert box_colour(1) != box_colour(2) and box_colour(3) == box_colour(3)


@pytest.mark.slow
def test_predict_prints_named_boxes_and_draws_them(boxes: Path, trained: Path, tmp_path: Path) -> None:
    image = boxes / "eval" / "images" / "00000.png"
    result = run_cli(boxes, "predict", str(PIPELINE), str(image), "--out", str(tmp_path), "--overlay", *sets(trained))
    record = json.loads(result.stdout.splitlines()[-1])
    # A display threshold (0.3 unless --threshold says): the model keeps every box above
    # modeler.score_threshold (0.05, for mAP), too many to read on a 64-pixel image.
    assert record["image"] == str(image) and record["size"] == [64, 64] and record["threshold"] == 0.3
    assert all(d["score"] >= 0.3 for d in record["detections"])
    everything = json.loads(run_cli(boxes, "predict", str(PIPELINE), str(image), "--threshold", "0",
                                    *sets(trained)).stdout.splitlines()[-1])
    assert everything["threshold"] == 0.0 and len(everything["detections"]) > len(record["detections"])
    # One box per object unless --all-classes: the model's NMS is per class, so at a low threshold
    # one shape carries a box of every class it resembles.
    every_class = json.loads(run_cli(boxes, "predict", str(PIPELINE), str(image), "--threshold", "0", "--all-classes",
                                     *sets(trained)).stdout.splitlines()[-1])
    hidden = everything.get("overlapping_hidden", 0)
    assert hidden > 0 and len(every_class["detections"]) == len(everything["detections"]) + hidden
    assert "overlapping_hidden" not in every_class
    shown = everything["detections"]
    assert all(_iou(a["box"], b["box"]) < 0.5 for i, a in enumerate(shown) for b in shown[i + 1:])
    best = everything["detections"][0]
    assert best["class"] in ("disc", "square", "triangle") and 0 < best["score"] <= 1
    assert all(0 <= v <= 64 for v in best["box"]) and best["box"][0] < best["box"][2]
    # Drawn 6x larger (towards 384 px, whole pixels), so that the class names and scores can be read.
    assert Image.open(record["overlay"]).size == (384, 384)
    # Nothing at the threshold: the record gives the best score, and predict says a lower threshold shows more.
    nothing = run_cli(boxes, "predict", str(PIPELINE), str(image), "--threshold", "1", *sets(trained))
    empty = json.loads(nothing.stdout.splitlines()[-1])
    assert empty["detections"] == [] and empty["highest_score"] == best["score"]
    assert f"dslrun: predict: no detection of {image} scores --threshold 1 or more (its best: {best['score']:.2f}); a " \
           "lower --threshold shows the boxes below it" in nothing.stderr.splitlines(), nothing.stderr


@pytest.mark.slow
def test_export_serves_detections_from_pixels_and_from_png_bytes(boxes: Path, trained: Path, tmp_path: Path) -> None:
    printed = run_cli(boxes, "export", str(PIPELINE), "--out", str(tmp_path / "saved"), *sets(trained)).stdout
    # The signature says what its shapes do not: the order and scale of a box's numbers.
    assert "detection_boxes: float32 [batch, 20, 4] (normalised [y_min, x_min, y_max, x_max] of the input image" in printed
    served = tf.saved_model.load(str(tmp_path / "saved"))
    files = sorted((boxes / "eval" / "images").glob("*.png"))[:3]
    pixels = tf.stack([tf.io.decode_png(path.read_bytes(), 3) for path in files])
    from_pixels = served.signatures["serving_default"](images=tf.cast(pixels, tf.float32) / 255.0)
    from_bytes = served.signatures["serving_bytes"](image_bytes=tf.constant([p.read_bytes() for p in files]))
    assert {"detection_boxes", "detection_scores", "detection_classes", "num_detections"} <= set(from_pixels)
    assert from_pixels["detection_boxes"].shape == (3, 20, 4) and int(from_pixels["num_detections"][0]) > 0
    np.testing.assert_allclose(from_pixels["detection_scores"].numpy(), from_bytes["detection_scores"].numpy(), atol=1e-5)


# ------------------------------------------------------------------------------ the detection augmenter
def augmenter(**params: Any) -> Any:
    from dsl.language.context import BuildContext
    from dsl.tasks.object_detection.augmenter import build

    return build({"standardize": False, **params}, BuildContext(image_shape=(64, 64, 3)))


def bright_rectangle() -> tuple[Any, dict[str, Any]]:
    image = np.zeros((64, 64, 3), np.float32)
    image[16:32, 8:40] = 1.0
    targets = {"boxes": tf.constant([[16 / 64, 8 / 64, 32 / 64, 40 / 64], [0, 0, 0, 0]], tf.float32),
               "classes": tf.constant([1, -1]), "count": tf.constant(1)}
    return tf.constant(image), targets


@pytest.mark.parametrize("seed", range(5))
def test_crop_scale_and_flip_move_the_boxes_with_the_pixels(seed: int) -> None:
    image, targets = bright_rectangle()
    out, moved = augmenter().train(image, targets, seed=tf.constant([seed, 3], tf.int64))
    assert out.shape == (64, 64, 3) and int(moved["count"]) == 1 and moved["classes"].numpy().tolist() == [1, -1]
    rows, cols = np.nonzero(out.numpy()[..., 0] > 0.5)
    y0, x0, y1, x1 = moved["boxes"][0].numpy() * 64
    assert abs(rows.min() - y0) <= 1.5 and abs(rows.max() + 1 - y1) <= 1.5, (rows.min(), rows.max(), y0, y1)
    assert abs(cols.min() - x0) <= 1.5 and abs(cols.max() + 1 - x1) <= 1.5, (cols.min(), cols.max(), x0, x1)


def test_the_same_seed_gives_the_same_example_and_another_seed_another() -> None:
    image, targets = bright_rectangle()
    first, again, other = (augmenter().train(image, targets, seed=tf.constant(s, tf.int64)) for s in ([1, 2], [1, 2], [5, 2]))
    np.testing.assert_array_equal(first[0].numpy(), again[0].numpy())
    assert not np.array_equal(first[1]["boxes"].numpy(), other[1]["boxes"].numpy())


def test_boxes_are_clipped_and_the_mostly_hidden_ones_dropped() -> None:
    kept = augmenter(min_visible=0.5)._kept(tf.constant([[-0.5, 0.0, 0.25, 0.5], [0.1, 0.1, 0.6, 1.2], [0, 0, 0, 0]]),
                                            tf.constant([2, 0, -1]), tf.constant(2))
    assert int(kept["count"]) == 1 and kept["classes"].numpy().tolist() == [0, -1, -1]
    np.testing.assert_allclose(kept["boxes"].numpy()[0], [0.1, 0.1, 0.6, 1.0])


def test_augmenter_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(DslError, match=r"augmenter.min_scale: 1.5 is above max_scale 1.2"):
        augmenter(min_scale=1.5, max_scale=1.2)


def test_coco_json_batches_are_the_csv_ones_and_name_the_categories(boxes: Path) -> None:
    from dsl.tasks.object_detection.coco_json import build as coco
    from dsl.tasks.object_detection.object_detection_csv import build as csv

    from_coco = coco(params(boxes / "train.json", classes=None), None)
    from_csv = csv(params(boxes / "train.csv"), None)
    assert from_coco.class_names == ["disc", "square", "triangle"]
    (_, a), (_, b) = (next(iter(source.dataset("train"))) for source in (from_coco, from_csv))
    for key in ("boxes", "classes", "count"):
        np.testing.assert_allclose(a[key].numpy(), b[key].numpy())


def test_validate_data_names_the_coco_categories_as_training_does(boxes: Path) -> None:
    """`validate --data` showed COCO categories as indices while predict named them (issue 41)."""
    from dsl.tasks.object_detection._data_check import detection_split

    split = detection_split(params(boxes / "train.json", classes=None), "train", "coco")
    assert split.class_names == ["disc", "square", "triangle"]


def test_training_on_a_bad_row_stops_with_one_located_line(boxes: Path, tmp_path: Path) -> None:
    lines = (boxes / "train.csv").read_text().splitlines()
    lines[2] = "train/images/00001.png,10,10,5,20,disc"
    (boxes / "bad.csv").write_text("\n".join(lines) + "\n")
    result = subprocess.run([*DSLRUN, str(PIPELINE), "--set", f"inputter.train={boxes / 'bad.csv'}",
                             "--set", f"runner.model_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                            env={**ENV, "DATA_DIR": str(boxes)}, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{boxes / 'bad.csv'}:3:1: error: box (10, 10, 5, 20) has min >= max" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("backbone", ["small", "MobileNetV2"])
def test_retinanet_outputs_deltas_and_logits_per_anchor_on_either_backbone(backbone: str) -> None:
    from dsl.language.context import BuildContext
    from dsl.tasks.object_detection._anchors import anchor_boxes, anchors_of
    from dsl.tasks.object_detection.retinanet import build

    network = {"backbone": backbone, "fpn_filters": 8, "base_filters": 4, "head_convs": 1,
               "anchors": {"levels": [3, 4], "sizes": [12, 24], "scales": [1.0], "ratios": [0.5, 1.0, 2.0]}}
    model = build(network, BuildContext(image_shape=(64, 64, 3), num_classes=3))
    outputs = model(tf.zeros((2, 64, 64, 3)), training=False)
    assert outputs.dtype == tf.float32
    assert outputs.shape == (2, len(anchor_boxes(anchors_of(network), (64, 64))), 4 + 3) == (2, (64 + 16) * 3, 7)
    # The class logits start at the prior probability 0.01 (RetinaNet's bias init).
    assert float(tf.reduce_mean(tf.sigmoid(outputs[..., 4:]))) == pytest.approx(0.01, abs=0.005)


@pytest.mark.parametrize("box_loss", ["smooth_l1", "giou"])
def test_the_loss_is_focal_plus_box_loss_and_zero_box_loss_for_perfect_deltas(box_loss: str) -> None:
    from dsl.engine.compiler import component_facts
    from dsl.language.context import BuildContext
    from dsl.language.resolved import Component
    from dsl.tasks.object_detection._box_coding import encode, giou_loss
    from dsl.tasks.object_detection.modeler import build

    network = {"type": "retinanet", "anchors": {"levels": [3], "sizes": [16], "scales": [1.0], "ratios": [1.0]}}
    context = BuildContext(image_shape=(32, 32, 3), num_classes=2)
    context.learn(component_facts("network", Component.from_resolved(network)))  # the network's anchors, as the compiler hands them on
    modeler = build({"box_loss": box_loss}, context)
    assert len(modeler.anchors) == 4 * 4  # one anchor per cell of the one 32/8 level asked for
    anchors = tf.constant(modeler.anchors)
    truth = {"boxes": tf.constant([[[0.1, 0.1, 0.5, 0.45], [0, 0, 0, 0]]]), "classes": tf.constant([[1, -1]]),
             "count": tf.constant([1])}
    from dsl.tasks.object_detection._box_coding import match

    matched, _, _ = match(truth, anchors, 0.5, 0.4)
    perfect = tf.concat([encode(matched, anchors), tf.fill([1, anchors.shape[0], 2], -5.0)], axis=-1)
    losses = modeler.loss(truth, perfect, tf.keras.Sequential())
    assert float(losses["box_loss"]) == pytest.approx(0.0, abs=1e-4) and 0 < float(losses["class_loss"]) < 10
    assert float(giou_loss(tf.constant([[0.0, 0.0, 0.2, 0.2]]), tf.constant([[0.5, 0.5, 0.7, 0.7]]))[0]) > 1.0


# ------------------------------------------------------------------------------ exact resume
def resume_sets(run: Path) -> list[str]:
    """The shipped pipeline made a resume test: deterministic, 2 train epochs of 10 steps, a
    checkpoint after every step (no val: nothing in it moves the weights)."""
    callbacks = yaml.safe_load(PIPELINE.read_text())["callbacks"]
    checkpoint = next(index for index, callback in enumerate(callbacks) if callback["type"] == "checkpoint")
    return sets(run, "deterministic=true", "runner.workflow=[[train, 1]]", "runner.max_epochs=2",
                f"callbacks.{checkpoint}.every_n_iters=1", f"callbacks.{checkpoint}.save_best=null",
                f"callbacks.{checkpoint}.max_to_keep=100")


@pytest.mark.slow
def test_sigkill_mid_epoch_then_rerun_ends_bit_identical(boxes: Path, tmp_path: Path) -> None:
    """The detection augmenter's crops, the padded boxes' order and the shuffle resume where they
    were: a run SIGKILLed mid-epoch and rerun ends with the weights of an uninterrupted run."""
    reference = tmp_path / "reference"
    run_cli(boxes, str(PIPELINE), *resume_sets(reference))
    killed = tmp_path / "killed"
    sigkill_when([*DSLRUN, str(PIPELINE), *resume_sets(killed)], killed / "checkpoints" / "ckpt-4.index",
                 {**ENV, "DATA_DIR": str(boxes)})  # mid-epoch 1 (10 steps an epoch)
    resumed = run_cli(boxes, str(PIPELINE), *resume_sets(killed))
    resumed_at = int(resumed.stderr.split("at step ")[1].split()[0])
    assert 3 <= resumed_at < 20, resumed.stderr
    assert_identical(reference / "checkpoints" / "ckpt-20", killed / "checkpoints" / "ckpt-20", rng=False)


def test_the_ssd_lite_head_predicts_the_same_anchors_with_depthwise_separable_convolutions() -> None:
    from dsl.language.context import BuildContext
    from dsl.tasks.object_detection.retinanet import build

    network = {"fpn_filters": 16, "base_filters": 4, "head_convs": 2,
               "anchors": {"levels": [3, 4], "sizes": [12, 24], "scales": [1.0, 1.5], "ratios": [1.0]}}
    context = BuildContext(image_shape=(64, 64, 3), num_classes=3)
    models = {head: build({**network, "head": head}, context) for head in ("retinanet", "ssd_lite")}
    outputs = {head: model(tf.zeros((2, 64, 64, 3)), training=False) for head, model in models.items()}
    assert outputs["ssd_lite"].shape == outputs["retinanet"].shape == (2, (64 + 16) * 2, 7)
    assert outputs["ssd_lite"].dtype == tf.float32
    assert float(tf.reduce_mean(tf.sigmoid(outputs["ssd_lite"][..., 4:]))) == pytest.approx(0.01, abs=0.005)
    heads = {head: [model.get_layer(name) for name in ("class_head", "box_head")] for head, model in models.items()}
    assert all(isinstance(layer, tf.keras.layers.SeparableConv2D) for head in heads["ssd_lite"] for layer in head.layers)
    assert len(heads["ssd_lite"][0].layers) == 3  # head_convs, then the output
    weights = {head: sum(layer.count_params() for layer in layers) for head, layers in heads.items()}
    assert weights["ssd_lite"] < weights["retinanet"] / 4, weights


# ------------------------------------------------------------------------------ 2 ranks = 1 process
def exactly(run: Path) -> list[str]:
    """The shipped detector made deterministic for a step-for-step comparison: no shuffle, no random
    crop, zoom or flip, momentum SGD (Adam's normalised step would turn a rounding-level gradient
    into a learning-rate-sized move), one epoch of 10 steps, checkpoints at steps 6 and 10."""
    callbacks = yaml.safe_load(PIPELINE.read_text())["callbacks"]
    checkpoint = next(index for index, callback in enumerate(callbacks) if callback["type"] == "checkpoint")
    return sets(run, "inputter.shuffle_buffer=0", "augmenter.min_crop_area=1", "augmenter.min_scale=1",
                "augmenter.max_scale=1", "augmenter.horizontal_flip=false",
                "modeler.optimizer={type: momentum, learning_rate: 0.01, momentum: 0.9}", "runner.workflow=[[train, 1]]",
                "runner.max_epochs=1", f"callbacks.{checkpoint}.every_n_iters=6", f"callbacks.{checkpoint}.save_best=null",
                f"callbacks.{checkpoint}.max_to_keep=10")


def launched(command: list[str], boxes: Path) -> str:
    """`command` to its end, every rank with it, on the generated boxes; its output."""
    from e2e_support import MULTIRANK_ENV, run_in_group

    result = run_in_group(command, {**MULTIRANK_ENV, "DATA_DIR": str(boxes)}, timeout=600)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def one_process_steps(boxes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("exact") / "one"
    launched([*DSLRUN, str(PIPELINE), *exactly(run)], boxes)
    return run


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("launcher", [["horovodrun", "-np", "2", "--gloo", "dslrun"],
                                      ["dslrun", "launch", "--backend", "collective", "--workers", "2"]],
                         ids=["horovod", "collective"])
def test_two_ranks_train_the_one_process_detector_of_the_same_global_batch(
        boxes: Path, one_process_steps: Path, tmp_path: Path, launcher: list[str]) -> None:
    """The shipped detector's global batch of 16 as 2 ranks of 8 (Horovod, collective) against one
    process, the same 10 steps (`exactly`). Each rank divides its loss by the positive anchors of
    the global batch / 2 (dsl.engine.global_batch), and auto synchronises batch norm at 8 per
    rank, so the averaged gradient is one process's; only the order of float sums differs.

    Measured (seed 5), the largest difference of a trainable weight: 2.5e-4 (rounding, grown
    through batch norm over 10 steps); dividing by each rank's own positives instead, 3.4e-3
    (the heads' biases, a tenth of their size); the run's last 4 steps move them by 1.2e-2.
    The moving statistics are left out: synchronised batch norm's variance, summed in another
    order, differs by up to 1.5e-3.
    """
    from e2e_support import checkpoint_arrays

    output = launched([*launcher, str(PIPELINE), *exactly(tmp_path / "two")], boxes)
    assert "sync batch norm on" in output, output[-3000:]

    def weights(run: Path, step: int) -> dict[str, np.ndarray]:
        return {name: array for name, array in checkpoint_arrays(run / "checkpoints" / f"ckpt-{step}").items()
                if name.startswith("model/") and "/moving_" not in name}

    one, two, earlier = weights(one_process_steps, 10), weights(tmp_path / "two", 10), weights(one_process_steps, 6)
    assert one.keys() == two.keys() and one
    apart = max(float(np.max(np.abs(one[name] - two[name]))) for name in one)
    moved = max(float(np.max(np.abs(one[name] - earlier[name]))) for name in one)
    assert apart < 1e-3 and moved > 5e-3, (apart, moved)
