"""`dslrun validate --data`: the data a pipeline reads, checked without TensorFlow.

Each test breaks a copy of one small generated set (`dslrun data synthetic`, 8x8, 3
classes) in one way and expects one located line, as a user would fix it.
"""

from __future__ import annotations

import csv
import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.cli import main

PIPELINE = """\
version: 1
name: data
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 3
  image_shape: [8, 8, 3]
  batch_size: 8
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
runner:
  max_epochs: 2
  workflow: [[train, 1], [val, 1]]
"""


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated") / "synthetic"
    result = invoke("data", "synthetic", "--out", str(out), "--num-train", "60", "--num-val", "30",
                    "--num-classes", "3", "--image-size", "8")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def data(generated: Path, tmp_path: Path) -> Path:
    """A private copy of the generated set, to break."""
    return Path(shutil.copytree(generated, tmp_path / "data"))


def pipeline(tmp_path: Path, data: Path, text: str = PIPELINE, **replace: str) -> Path:
    text = text.format(data=data)
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def rows(csv_file: Path) -> list[list[str]]:
    return list(csv.reader(csv_file.open()))


def line_of(csv_file: Path, index: int) -> tuple[int, Path]:
    """CSV line and image of the data row `index` (the header is line 1)."""
    return index + 2, csv_file.parent / rows(csv_file)[index + 1][0]


def test_clean_data_is_summed_up_per_split(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{path}: inputter.train: 60 examples from {data}/train.csv; 3 classes, 20 each; 8x8 RGB; "
        "7 steps per epoch (batch 8 x 1 process)",
        f"{path}: inputter.val: 30 examples from {data}/eval.csv; 3 classes, 10 each; 8x8 RGB; "
        "4 batches per pass (batch 8 x 1 process)",
    ]
    assert result.stderr.strip() == "1 file, 0 invalid, 0 errors"


def test_world_size_divides_the_global_batch_not_the_steps(tmp_path: Path, data: Path) -> None:
    """batch_scaling none (the default): 2 processes take 4 of the global 8 each, the steps stay."""
    result = invoke("validate", "--data", "--world-size", "2", str(pipeline(tmp_path, data)))
    assert "7 steps per epoch (batch 4 x 2 processes)" in result.stdout
    assert "4 batches per pass (batch 4 x 2 processes)" in result.stdout
    assert ("runner at 2 processes: global batch 8 = 2 x 4, learning rate 0.1 (x1, batch_scaling none), no warmup, "
            "7 steps per epoch, 14 steps in the run") in result.stdout
    result = invoke("validate", "--world-size", "2", str(pipeline(tmp_path, data)))
    assert result.exit_code == 2 and "--world-size only applies to --data" in result.output


def test_world_size_with_a_per_rank_batch_divides_the_steps_and_scales_the_rate(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data, **{"  max_epochs: 2": "  max_epochs: 2\n  batch_scaling: linear"})
    result = invoke("validate", "--data", "--world-size", "2", "--format", "json", str(path))
    scaling = json.loads(result.stdout)["files"][0]["data"][-1]["scaling"]
    assert scaling == {"world_size": 2, "replicas": 2, "batch_size": 8, "global_batch_size": 16, "learning_rate": 0.2,
                       "lr_factor": 2.0, "lr_scaling": "linear", "batch_scaling": "linear", "warmup_steps": 0,
                       "asynchronous_workers": 1, "momentum": None, "steps_per_epoch": 3, "run_steps": 6,
                       "sync_batch_norm": False}
    # A doubled rate with no warmup: warned at the setting that scaled it, with the fix.
    result = invoke("validate", "--data", "--world-size", "2", str(path))
    assert result.exit_code == 0
    warning = next(x for x in result.stdout.splitlines() if ": warning: runner.batch_scaling:" in x)
    assert warning.startswith(f"{path}:14:3: warning: runner.batch_scaling: at 2 processes the learning rate is 0.2 (2x, "
                              "runner.lr_scaling linear) with no warmup (no warmup on one process either)")
    assert "lengthen modeler.lr_schedule.warmup_epochs, or set runner.batch_scaling: none" in warning


def test_a_scaled_rate_with_less_warmup_than_one_process_is_a_warning(tmp_path: Path, data: Path) -> None:
    """The quickstart's failure at 2 ranks: warmup in epochs halves in steps while the rate doubles."""
    schedule = "modeler: {type: image_classification, lr_schedule: {type: piecewise, boundaries: [1], values: [1.0, 0.1], " \
               "warmup_epochs: 1}}"
    path = pipeline(tmp_path, data, **{"modeler: {type: image_classification}": schedule,
                                       "  max_epochs: 2": "  max_epochs: 2\n  batch_scaling: linear"})
    result = invoke("validate", "--data", "--world-size", "2", str(path))
    assert "with a warmup of 3 steps (7 steps on one process at 0.1)" in result.stdout
    result = invoke("validate", "--data", "--world-size", "2", str(path), "--set", "runner.batch_scaling=none")
    assert "warning: runner.batch_scaling" not in result.stdout
    assert "learning rate 0.1 (x1, batch_scaling none), warmup 7 steps" in result.stdout


def test_a_global_batch_too_small_for_the_world_is_an_error_and_an_uneven_one_a_warning(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", "--world-size", "16", str(path))
    assert result.exit_code == 1
    assert (f"{path}:9:15: error: inputter.batch_size: inputter.batch_size 8 is the global batch "
            "(runner.batch_scaling: none), and 16 replicas cannot share it") in result.stdout
    result = invoke("validate", "--data", "--world-size", "3", str(path))
    assert result.exit_code == 0
    assert (f"{path}:9:15: warning: inputter.batch_size: the global batch 8 does not divide across 3 processes: "
            "each takes 2, 6 in all") in result.stdout


def test_a_missing_image_is_an_error_at_its_csv_line(tmp_path: Path, data: Path) -> None:
    line, image = line_of(data / "train.csv", 4)
    image.unlink()
    result = invoke("validate", "--data", str(pipeline(tmp_path, data)))
    assert result.exit_code == 1
    errors = [x for x in result.stdout.splitlines() if ": error: " in x]
    assert errors == [f"{data / 'train.csv'}:{line}:1: error: inputter.train: image {image}: No such file or "
                      "directory; fix or remove it (or set inputter.skip_corrupt: true)"]


def test_a_truncated_png_is_an_error_at_its_csv_line(tmp_path: Path, data: Path) -> None:
    line, image = line_of(data / "eval.csv", 2)
    whole = image.read_bytes()
    image.write_bytes(whole[: len(whole) // 2])
    result = invoke("validate", "--data", str(pipeline(tmp_path, data)))
    assert result.exit_code == 1
    assert f"{data / 'eval.csv'}:{line}:1: error: inputter.val: image {image}: truncated (no end marker in its " \
           f"{len(whole) // 2} bytes)" in result.stdout


def test_damage_inside_a_png_is_found_without_decoding(tmp_path: Path, data: Path) -> None:
    line, image = line_of(data / "train.csv", 0)
    damaged = bytearray(image.read_bytes())
    damaged[40] ^= 0xFF  # inside the first chunk after the header: its checksum no longer matches
    image.write_bytes(bytes(damaged))
    result = invoke("validate", "--data", str(pipeline(tmp_path, data)))
    assert result.exit_code == 1
    assert f"{data / 'train.csv'}:{line}:1: error: inputter.train: image {image}: cannot be decoded" in result.stdout


def test_a_label_out_of_range_is_an_error_at_its_csv_line_and_every_bad_row_is_reported(tmp_path: Path, data: Path) -> None:
    table = rows(data / "train.csv")
    table[3][1], table[7][1] = "3", "x"
    with (data / "train.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(table)
    result = invoke("validate", "--data", str(pipeline(tmp_path, data)))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[:2] == [
        f"{data / 'train.csv'}:4:1: error: inputter.train: label 3 is outside 0..2; fix the row or set "
        "inputter.num_classes",
        f"{data / 'train.csv'}:8:1: error: inputter.train: label 'x' is not an integer; labels are class indices "
        "0..2, or class names when inputter.classes lists them",  # no header hint: not the first row
    ]


def test_a_class_without_examples_is_a_warning_at_the_split(tmp_path: Path, data: Path) -> None:
    table = [row for row in rows(data / "eval.csv") if row[1] != "2"]
    with (data / "eval.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(table)
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 0
    assert f"{path}:6:8: warning: inputter.val: class 2 has no example in this split: its accuracy is never " \
           "measured; add examples or check the labels" in result.stdout
    assert "inputter.val: 20 examples from" in result.stdout and "2 classes, 10 each" in result.stdout


def test_heavy_imbalance_is_a_warning(tmp_path: Path, data: Path) -> None:
    table = rows(data / "train.csv")
    kept = table[:1] + [row for row in table[1:] if row[1] != "1"] + [row for row in table[1:] if row[1] == "1"][:1]
    with (data / "train.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(kept)
    result = invoke("validate", "--data", str(pipeline(tmp_path, data)))
    assert "warning: inputter.train: the classes are heavily imbalanced: class 0 has 20 examples, class 1 1 (20x " \
           "fewer)" in result.stdout


def test_an_image_in_train_and_val_is_a_warning_naming_both(tmp_path: Path, data: Path) -> None:
    train_line, train_image = line_of(data / "train.csv", 5)
    val_line, val_image = line_of(data / "eval.csv", 9)
    shutil.copy(train_image, val_image)
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 0
    assert (f"{path}:6:8: warning: inputter.val: 1 of 30 images has the same content as a train image "
            f"(eval.csv line {val_line} = train.csv line {train_line}), so the val score overstates what the model "
            "learnt; remove it from one of the splits") in result.stdout


def test_with_skip_corrupt_bad_images_are_warnings_and_not_counted(tmp_path: Path, data: Path) -> None:
    _, image = line_of(data / "train.csv", 4)
    image.write_bytes(b"not an image")
    path = pipeline(tmp_path, data, **{"  batch_size: 8": "  batch_size: 8\n  skip_corrupt: true"})
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 0
    assert f"warning: inputter.train: image {image}: not a PNG, JPEG, BMP or GIF file; skip_corrupt leaves it out" in result.stdout
    assert "inputter.train: 59 examples from" in result.stdout and ", 1 more unusable;" in result.stdout


def test_a_missing_csv_is_located_at_its_yaml_value(tmp_path: Path, data: Path) -> None:
    (data / "eval.csv").unlink()
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    assert f"{path}:6:8: error: inputter.val: {data}/eval.csv does not exist" in result.stdout
    assert f"{path}: inputter.val: nothing read from {data}/eval.csv (see the errors above)" in result.stdout


def test_steps_per_epoch_decide_the_schedule_and_batch_checks(tmp_path: Path, data: Path) -> None:
    # 60 examples / 8 = 7 steps per epoch: a warmup of 0.5 epochs is 4 steps, longer than a 3-step run.
    path = pipeline(tmp_path, data, **{"max_epochs: 2": "max_iters: 3",
                                       "{type: image_classification}": "{type: image_classification, lr_schedule: "
                                                                       "{type: cosine, warmup_epochs: 0.5}}"})
    assert invoke("validate", str(path)).exit_code == 0  # epochs alone cannot tell
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    assert (f"{path}:11:82: error: modeler.lr_schedule.warmup_epochs: the warmup (0.5 epochs = 4 steps at 7 steps "
            f"per epoch) is as long as the whole run (runner.max_iters: 3 at {path}:13 = 3 steps), so the cosine has "
            "no steps left") in result.stdout
    path = pipeline(tmp_path, data, **{"batch_size: 8": "batch_size: 64"})
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    assert (f"{path}:9:15: error: inputter.batch_size: batch 64 x 1 process(es) is larger than the train data "
            "(60 examples)") in result.stdout


def test_json_report_carries_the_splits(tmp_path: Path, data: Path) -> None:
    import json

    result = invoke("validate", "--data", "--format", "json", str(pipeline(tmp_path, data)))
    [entry] = json.loads(result.stdout)["files"]
    assert entry["data"][0] == {"split": "inputter.train", "source": f"{data}/train.csv", "examples": 60,
                                "unusable": 0, "classes": {"0": 20, "1": 20, "2": 20}, "sizes": {"8x8": 60},
                                "modes": {"RGB": 60}, "steps": 7}


# ------------------------------------------------------------------ the other inputters that read files

FOLDER = PIPELINE.replace("type: image_classification_csv", "type: image_folder").replace(
    "{data}/train.csv", "{data}/folders/train").replace("{data}/eval.csv", "{data}/folders/val")


def as_folders(data: Path) -> None:
    for split, listing in (("train", "train.csv"), ("val", "eval.csv")):
        for image, label in rows(data / listing)[1:]:
            target = data / "folders" / split / f"c{label}"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(data / image, target)


def test_image_folder_bad_image_and_empty_class(tmp_path: Path, data: Path) -> None:
    as_folders(data)
    for image in (data / "folders" / "val" / "c1").iterdir():
        image.unlink()
    bad = data / "folders" / "train" / "c0" / "zz.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    path = pipeline(tmp_path, data, FOLDER, **{"[8, 8, 3]": "[4, 4, 1]"})
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{bad}:1:1: error: inputter.train: image {bad}: truncated")
    assert f"{path}:6:8: warning: inputter.val: class 1 (c1) has no example in this split" in lines[1]
    assert lines[2].endswith("60 examples from " + f"{data}/folders/train, 1 more unusable; 3 classes, 20 each; "
                             "8x8 RGB (fed as 4x4x1); 7 steps per epoch (batch 8 x 1 process)")


def test_image_folder_with_a_missing_train_folder_blames_train_alone(tmp_path: Path, data: Path) -> None:
    """Trial B: a mistyped train folder gave its error, then "inputter.val: nothing read ... (see the
    errors above)" though the val folder was fine: val's classes come from the train folders."""
    as_folders(data)
    path = pipeline(tmp_path, data, FOLDER.replace("{data}/folders/train", "{data}/folders/trian"))
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1 and f"error: inputter.train: {data}/folders/trian does not exist" in errors[0], result.stdout
    assert f"{path}: inputter.val: {data}/folders/val not read: its classes are the sub-folders of inputter.train, " \
           "see the error above" in result.stdout.splitlines(), result.stdout
    assert "1 invalid, 1 error" in result.output


CIFAR = """\
version: 1
inputter: {{type: cifar10_binary, data_dir: {data}, batch_size: 4}}
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
runner:
  max_epochs: 1
  workflow: [[train, 1], [val, 1]]
"""


def test_cifar10_binary_labels_size_and_overlap(tmp_path: Path) -> None:
    folder = tmp_path / "cifar"
    folder.mkdir()

    def record(label: int, fill: int) -> bytes:
        return bytes([label]) + bytes([fill]) * 3072

    for number in range(1, 6):
        (folder / f"data_batch_{number}.bin").write_bytes(b"".join(record(i, number * 10 + i) for i in range(10)))
    (folder / "test_batch.bin").write_bytes(b"".join(record(i, 200 + i) for i in range(9)) + record(12, 1) + record(3, 13))
    path = pipeline(tmp_path, folder, CIFAR)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    assert f"{folder}/test_batch.bin:1:1: error: inputter.val: record 10: label 12 is outside 0..9" in result.stdout
    assert ("warning: inputter.val: 1 of 10 images has the same content as a train image (test_batch.bin record 11 "
            "= data_batch_1.bin record 4)") in result.stdout
    assert f"inputter.train: 50 examples from data_batch_1.bin .. data_batch_5.bin in {folder}; 10 classes, 5 each; " \
           "32x32 RGB; 12 steps per epoch" in result.stdout
    with (folder / "data_batch_2.bin").open("ab") as handle:
        handle.write(b"xx")
    assert f"{folder}/data_batch_2.bin:1:1: error: inputter.train: {folder}/data_batch_2.bin has 30732 bytes, not a " \
           "positive multiple" in invoke("validate", "--data", str(path)).stdout


TFRECORD = PIPELINE.replace("type: image_classification_csv", "type: tfrecord").replace(
    "{data}/train.csv", "{data}/train.tfrecord").replace("{data}/eval.csv", "'{data}/val-*.tfrecord'")


def write_records(path: Path, records: list[bytes]) -> None:
    """TFRecord framing (length, its CRC, data, data CRC); the CRCs are not checked by validate --data."""
    with path.open("wb") as handle:
        for record in records:
            handle.write(struct.pack("<QI", len(record), 0) + record + struct.pack("<I", 0))


def example(image: bytes, label: int) -> bytes:
    from dsl.tasks.image_classification._example_proto import example_class

    message = example_class()()
    for key, value in (("image/encoded", image), ("image/class/label", label)):
        entry = message.features.feature.add(key=key)
        if isinstance(value, bytes):
            entry.value.bytes_list.value.append(value)
        else:
            entry.value.int64_list.value.append(value)
    return message.SerializeToString()


def test_tfrecord_records_are_parsed_without_tensorflow(tmp_path: Path, data: Path) -> None:
    listed = [(data / image, int(label)) for image, label in rows(data / "train.csv")[1:]]
    records = [example(image.read_bytes(), label) for image, label in listed]
    records[2] = example(listed[2][0].read_bytes()[:60], 0)
    records[4] = example(listed[4][0].read_bytes(), 7)
    write_records(data / "train.tfrecord", records)
    write_records(data / "val-0.tfrecord", records[10:20])
    path = pipeline(tmp_path, data, TFRECORD)
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 1
    assert f"{data}/train.tfrecord:1:1: error: inputter.train: train.tfrecord record 3: the image is truncated" in result.stdout
    assert (f"{data}/train.tfrecord:1:1: error: inputter.train: record 5: label 7 (feature 'image/class/label') is "
            "outside 0..2") in result.stdout
    assert "inputter.val: 10 of 10 images have the same content as a train image" in result.stdout
    assert "inputter.train: 58 examples from 1 TFRecord file, 1 more unusable; 3 classes" in result.stdout


@pytest.mark.slow
def test_tfrecords_written_by_tensorflow_are_read_alike(tmp_path: Path, data: Path) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(data / "train.tfrecord")) as writer:
        for image, label in rows(data / "train.csv")[1:]:
            features = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[(data / image).read_bytes()])),
                        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    shutil.copy(data / "train.tfrecord", data / "val-0.tfrecord")
    result = invoke("validate", "--data", str(pipeline(tmp_path, data, TFRECORD)))
    assert "inputter.train: 60 examples from 1 TFRecord file; 3 classes, 20 each; 8x8 RGB; 7 steps" in result.stdout


def test_validate_data_imports_no_tensorflow(tmp_path: Path, data: Path) -> None:
    from test_no_tensorflow import loaded_modules

    assert loaded_modules("validate", "--data", str(pipeline(tmp_path, data))) == []


def test_an_asynchronous_cluster_divides_the_rate_by_its_workers_and_says_so(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data)
    result = invoke("validate", "--data", "--world-size", "4", str(path), "--set", "runner.backend=ps")
    assert result.exit_code == 0, result.stdout
    assert ("runner at 4 processes: batch 8 per update from 4 asynchronous workers, learning rate 0.025 "
            "(x0.25, async_lr_scaling staleness), momentum 0.15 (0.9 - 0.75, async_momentum staleness)") in result.stdout
    off = invoke("validate", "--data", "--world-size", "4", str(path), "--set", "runner.backend=ps",
                 "--set", "runner.async_lr_scaling=none", "--set", "runner.async_momentum=none")
    assert "learning rate 0.1 (x1, async_lr_scaling none), no warmup" in off.stdout and "momentum" not in off.stdout
    record = json.loads(invoke("validate", "--data", "--world-size", "2", str(path), "--set", "runner.backend=ps",
                               "--format", "json").stdout)
    assert record["files"][0]["data"][-1]["scaling"]["momentum"] == 0.4


CNN = "network: {type: simple_cnn, filters: [4], dense_units: 8, batch_norm: true}"


def test_batch_norm_is_synchronised_by_default_below_16_per_replica_and_said_so(tmp_path: Path, data: Path) -> None:
    """sync_batch_norm: auto (the default): 4 of the global 8 per replica with batch norm turns it on,
    said on the runner line, with no warning left to act on."""
    path = pipeline(tmp_path, data, **{"network: {type: mlp, hidden_units: [8]}": CNN})
    result = invoke("validate", "--data", "--world-size", "2", str(path))
    assert result.exit_code == 0
    assert ("runner at 2 processes: global batch 8 = 2 x 4, learning rate 0.1 (x1, batch_scaling none), no warmup, "
            "7 steps per epoch, 14 steps in the run, sync batch norm on (auto: 4 examples per replica, below 16)"
            ) in result.stdout
    assert "warning" not in result.stdout
    # The collective backend decides by its own switch, alike.
    collective = invoke("validate", "--data", "--world-size", "2", str(path), "--set", "runner.backend=collective")
    assert "sync batch norm on (auto: 4 examples per replica, below 16)" in collective.stdout
    # 16 per replica: off, and why.
    large = invoke("validate", "--data", "--world-size", "2", str(path), "--set", "inputter.batch_size=32")
    assert "sync batch norm off (auto: 16 examples per replica, at least 16)" in large.stdout
    # One process has nothing to synchronise; an MLP no batch statistics: nothing said.
    one = invoke("validate", "--data", "--world-size", "1", str(path))
    assert "sync batch norm" not in one.stdout
    plain = invoke("validate", "--data", "--world-size", "2", str(pipeline(tmp_path, data)))
    assert "sync batch norm" not in plain.stdout and "normalises batch statistics" not in plain.stdout


def test_batch_norm_forced_off_below_16_per_replica_is_a_warning_at_the_switch(tmp_path: Path, data: Path) -> None:
    path = pipeline(tmp_path, data, **{"network: {type: mlp, hidden_units: [8]}": CNN,
                                       "  max_epochs: 2": "  max_epochs: 2\n  horovod: {sync_batch_norm: false}"})
    result = invoke("validate", "--data", "--world-size", "2", str(path))
    assert result.exit_code == 0
    assert "sync batch norm off (runner.horovod.sync_batch_norm: false)" in result.stdout
    assert (f"{path}:14:30: warning: runner.horovod.sync_batch_norm: at 2 processes each normalises batch statistics "
            "over 4 examples of the global 8") in result.stdout
    assert "runner.horovod.sync_batch_norm: false keeps them per replica: remove it (auto synchronises below 16" \
        in result.stdout
    forced = invoke("validate", "--data", "--world-size", "2", str(path), "--set", "runner.horovod.sync_batch_norm=true")
    assert "sync batch norm on (runner.horovod.sync_batch_norm: true)" in forced.stdout
    assert "warning" not in forced.stdout


def test_a_backend_without_a_batch_norm_switch_says_it_cannot_synchronise(tmp_path: Path, data: Path) -> None:
    """ps central storage splits a step over its replicas but has no synchronised batch norm: the
    line says so and the warning names what can, not another backend's switch."""
    path = pipeline(tmp_path, data, **{"network: {type: mlp, hidden_units: [8]}": CNN})
    result = invoke("validate", "--data", "--world-size", "2", str(path), "--set", "runner.backend=ps",
                    "--set", "runner.ps.mode=central_storage")
    assert "sync batch norm off (this backend cannot synchronise: 4 examples per replica)" in result.stdout
    assert "this backend cannot synchronise them: raise inputter.batch_size to 32, or train on runner.backend: " \
        "horovod or collective" in result.stdout


@pytest.mark.parametrize(("batch", "drop", "warned"), [("32", "", True), ("20", "", False), ("8", "", False),
                                                       ("32", "  drop_remainder: false\n", False)])
def test_a_batch_that_leaves_out_much_of_the_train_set_each_epoch_is_a_warning(tmp_path: Path, data: Path, batch: str,
                                                                               drop: str, warned: bool) -> None:
    """Trial B10: 60 few-shot images at batch 32 trained on 32 an epoch (the last, incomplete batch
    dropped), and validate --data said "1 step per epoch" only. Batch 8 leaves 4 of 60 out: not said."""
    path = pipeline(tmp_path, data, **{"  batch_size: 8\n": f"  batch_size: {batch}\n{drop}"})
    result = invoke("validate", "--data", str(path))
    assert result.exit_code == 0, result.output
    said = [line for line in result.stdout.splitlines() if "trains on" in line]
    if not warned:
        assert said == [], said
        return
    assert said == [f"{path}:9:15: warning: inputter.batch_size: batch 32 x 1 process(es) trains on 32 of the 60 train "
                    "examples an epoch: inputter.drop_remainder leaves out the last 28, which are not a full batch "
                    "(other ones each epoch, as the data is shuffled); lower inputter.batch_size, or set "
                    "inputter.drop_remainder: false"], result.stdout
