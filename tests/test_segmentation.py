"""Semantic segmentation from YAML alone: the generated set, the inputter's errors, the joint
augmenter, the networks, the modeler's loss and metrics, and train / eval / predict / export /
resume through the real CLI on data made by `dslrun data synthetic-segmentation`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
from PIL import Image

from dsl.inputters.pipeline import explain_data_error
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.modelers.mask_records import palette
from dsl.tasks.image_segmentation._synthetic_data import SegmentationSpec, write

from e2e_support import DSLRUN, ENV, dslrun, sigkill_when

PIPELINE = Path(__file__).resolve().parents[1] / "pipelines" / "segmentation.yaml"


# ------------------------------------------------------------------------------------- helpers
def inputter(csv: Path, **params: Any) -> Any:
    from dsl.tasks.image_segmentation.image_segmentation_csv import build

    return build({"train": str(csv), "num_classes": 4, "image_shape": [16, 16, 3], "batch_size": 2,
                  "shuffle_buffer": 0, **params}, None)


def first_error(source: Any) -> str:
    """The one line a data error becomes while iterating the train data."""
    with pytest.raises(tf.errors.OpError) as caught:
        for _ in source.dataset("train", seed=1):
            pass
    explained = explain_data_error(caught.value)
    assert explained is not None, caught.value
    return str(explained)


def pair_csv(directory: Path, image: np.ndarray, mask: np.ndarray, rows: int = 2) -> Path:
    """A CSV of `rows` good pairs of 16x16, then the pair (image, mask) on the last line."""
    directory.mkdir(parents=True, exist_ok=True)
    good = np.zeros((16, 16), np.uint8)
    good[4:8, 4:8] = 2
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(directory / "good.png")
    Image.fromarray(good).save(directory / "good_mask.png")
    Image.fromarray(image).save(directory / "bad.png")
    Image.fromarray(mask).save(directory / "bad_mask.png")
    lines = ["image_path,mask_path", *["good.png,good_mask.png"] * rows, "bad.png,bad_mask.png"]
    (directory / "list.csv").write_text("\n".join(lines) + "\n")
    return directory / "list.csv"


def context(**facts: Any) -> BuildContext:
    found = BuildContext()
    found.learn({"image_shape": (16, 16, 3), "num_classes": 4, "ignore_label": 255, **facts})
    return found


# ------------------------------------------------------------------------------------ data set
def test_generated_set_is_learnable_shapes_and_rewritten_only_when_incomplete(tmp_path: Path) -> None:
    spec = SegmentationSpec(num_train=12, num_val=4, num_classes=4, image_size=24, seed=3)
    assert write(tmp_path, spec) == (True, {"train": 12, "eval": 4})
    lines = (tmp_path / "train.csv").read_text().splitlines()
    assert lines[0] == "image_path,mask_path" and len(lines) == 13
    image_path, mask_path = lines[1].split(",")
    mask = Image.open(tmp_path / mask_path)
    assert mask.mode == "L" and mask.size == (24, 24) and Image.open(tmp_path / image_path).mode == "RGB"
    shown = set()
    for line in lines[1:]:
        shown |= set(np.unique(np.asarray(Image.open(tmp_path / line.split(",")[1]))).tolist())
    assert shown == {0, 1, 2, 3}
    assert write(tmp_path, spec)[0] is False
    (tmp_path / "dataset.json").unlink()  # as an interrupted run leaves it
    assert write(tmp_path, spec)[0] is True


# ------------------------------------------------------------------------------------ inputter
def test_inputter_yields_float_images_and_int_masks_nearest_resized(tmp_path: Path) -> None:
    mask = np.zeros((32, 32), np.uint8)
    mask[:, 16:] = 3
    mask[0, 0] = 255
    csv = pair_csv(tmp_path, np.full((32, 32, 3), 200, np.uint8), mask, rows=0)
    images, masks = next(iter(inputter(csv, val=str(csv)).dataset("val")))
    assert images.dtype == tf.float32 and images.shape == (1, 16, 16, 3)
    assert masks.dtype == tf.int32 and masks.shape == (1, 16, 16)
    assert set(np.unique(masks.numpy())) <= {0, 3, 255}  # nearest neighbour: no value between classes
    assert (masks.numpy()[0, :, 8:] == 3).all() and (masks.numpy()[0, 1:, :8] == 0).all()
    assert inputter(csv).facts() == {"image_shape": (16, 16, 3), "num_classes": 4, "ignore_label": 255}


def test_a_missing_mask_is_named_with_its_csv_line_when_the_csv_is_read(tmp_path: Path) -> None:
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16), np.uint8))
    (tmp_path / "bad_mask.png").unlink()
    with pytest.raises(DslError, match=r"list\.csv line 4: mask file .*bad_mask\.png does not exist"):
        inputter(csv)


def test_a_row_without_two_columns_is_named(tmp_path: Path) -> None:
    csv = tmp_path / "list.csv"
    csv.write_text("image_path,mask_path\na.png\n")
    with pytest.raises(DslError, match=r"list\.csv line 2: expected 2 columns"):
        inputter(csv)


def test_a_mask_of_another_size_than_its_image_stops_with_its_file_and_line(tmp_path: Path) -> None:
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), np.zeros((12, 16), np.uint8))
    message = first_error(inputter(csv))
    assert "bad_mask.png" in message and "list.csv line 4" in message
    assert "is 12 x 16 pixels but its image is 16 x 16" in message


def test_a_mask_value_outside_the_classes_stops_with_its_file_line_and_value(tmp_path: Path) -> None:
    mask = np.zeros((16, 16), np.uint8)
    mask[3, 3] = 7
    mask[5, 5] = 255  # ignore_label: allowed
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), mask)
    message = first_error(inputter(csv))
    assert "bad_mask.png" in message and "list.csv line 4" in message
    assert "has the value 7 which is none of classes 0..3 or ignore_label 255" in message


def test_a_colour_mask_is_refused(tmp_path: Path) -> None:
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16, 3), np.uint8))
    assert "has 3 channels" in first_error(inputter(csv))


@pytest.mark.parametrize("params, match", [
    ({"ignore_label": 2}, "inputter.ignore_label: 2 is also a class"),
    ({"class_names": ["a", "b"]}, "inputter.class_names: 2 names for num_classes 4"),
])
def test_contradicting_settings_are_refused(tmp_path: Path, params: dict[str, Any], match: str) -> None:
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16), np.uint8))
    with pytest.raises(DslError, match=match):
        inputter(csv, **params)


def test_skip_corrupt_leaves_out_a_pair_whose_mask_is_missing(tmp_path: Path) -> None:
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16), np.uint8))
    (tmp_path / "bad_mask.png").unlink()
    source = inputter(csv, skip_corrupt=True)
    assert source.num_examples("train") == 2 and "bad_mask.png" in source.skipped["train"][0]


def test_validate_data_locates_each_bad_mask_without_training(tmp_path: Path) -> None:
    mask = np.zeros((16, 16), np.uint8)
    mask[2, 2] = 9
    csv = pair_csv(tmp_path, np.zeros((16, 16, 3), np.uint8), mask)
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "colour_mask.png")
    Image.fromarray(np.zeros((8, 16), np.uint8)).save(tmp_path / "small_mask.png")
    with open(csv, "a") as handle:
        handle.write("good.png,colour_mask.png\ngood.png,small_mask.png\ngood.png,none.png\n")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"version: 1\ninputter: {{type: image_segmentation_csv, train: {csv}, num_classes: 4, "
                        "image_shape: [16, 16, 3], batch_size: 2}\nnetwork: {type: unet, depth: 2}\n"
                        "modeler: {type: image_segmentation}\nrunner: {workflow: [[train, 1]], max_epochs: 1}\n")
    result = dslrun("validate", "--data", str(pipeline), check=False)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    for line, problem in [(4, "has the value 9, which is none of classes 0..3 or ignore_label 255"),
                          (5, "Pillow mode RGB, not a single-channel"), (6, "is 8x16 pixels but its image"),
                          (7, "none.png does not exist")]:
        assert any(text.startswith(f"{csv}:{line}:1: error") and problem in text for text in lines), (line, lines)
    assert "inputter.train: 2 examples" in result.stdout


# ----------------------------------------------------------------------------------- augmenter
def augmenter(**params: Any) -> Any:
    from dsl.tasks.image_segmentation.augmenter import build

    return build({"standardize": False, **params}, context())


def coloured(mask: np.ndarray) -> np.ndarray:
    """An image whose pixel colour says its mask class: channel k is 1 where the class is k."""
    return np.eye(3, dtype=np.float32)[np.minimum(mask, 2)]


def test_flip_and_crop_move_the_image_and_its_mask_together() -> None:
    rng = np.random.default_rng(0)
    mask = rng.integers(0, 3, (16, 16)).astype(np.int32)
    image = coloured(mask)
    flipped = 0
    transform = augmenter(min_scale=1.0, max_scale=1.0, crop_size=[8, 12])
    for index in range(8):
        out_image, out_mask = transform.train(tf.constant(image), tf.constant(mask), seed=tf.constant([5, index], tf.int64))
        assert out_image.shape == (8, 12, 3) and out_mask.shape == (8, 12)
        np.testing.assert_array_equal(np.argmax(out_image.numpy(), -1), out_mask.numpy())
        found = [(top, left) for top in range(9) for left in range(5) if (mask[top:top + 8, left:left + 12] == out_mask.numpy()).all()]
        flipped += not found
    assert 0 < flipped < 8  # some crops flipped, some not: the image followed each time


def test_scaling_down_pads_the_mask_with_ignore_label_and_keeps_the_pair_aligned() -> None:
    mask = np.ones((16, 16), np.int32)
    image = coloured(mask)
    transform = augmenter(min_scale=0.5, max_scale=0.5, horizontal_flip=False)
    out_image, out_mask = transform.train(tf.constant(image), tf.constant(mask), seed=tf.constant([1, 2], tf.int64))
    out_mask = out_mask.numpy()
    assert out_mask.shape == (16, 16) and set(np.unique(out_mask)) == {1, 255}
    assert (out_mask == 1).sum() == 64  # the 8x8 scaled example, the rest padding
    assert (out_image.numpy()[out_mask == 255] == 0).all() and (out_image.numpy()[out_mask == 1, 1] > 0.99).all()


def test_the_same_seed_gives_the_same_example_and_eval_only_normalises() -> None:
    mask = np.random.default_rng(1).integers(0, 3, (16, 16)).astype(np.int32)
    image = tf.constant(coloured(mask))
    transform = augmenter(standardize=True)
    seed = tf.constant([3, 4], tf.int64)
    first, second = transform.train(image, tf.constant(mask), seed=seed), transform.train(image, tf.constant(mask), seed=seed)
    np.testing.assert_array_equal(first[1].numpy(), second[1].numpy())
    np.testing.assert_allclose(transform.eval(image).numpy(), tf.image.per_image_standardization(image).numpy())


@pytest.mark.parametrize("params, facts, match", [
    ({"min_scale": 2.0, "max_scale": 1.0}, {}, r"augmenter\.min_scale: 2\.0 is above max_scale"),
    ({"min_scale": 0.5}, {"ignore_label": None}, "padding takes the mask value inputter.ignore_label, which is null"),
])
def test_augmenter_settings_that_cannot_work_are_refused(params: dict[str, Any], facts: dict[str, Any], match: str) -> None:
    from dsl.tasks.image_segmentation.augmenter import build

    with pytest.raises(DslError, match=match):
        build(params, context(**facts))


# ------------------------------------------------------------------------------------ networks
def test_unet_gives_float32_logits_at_any_divisible_input_size_even_under_mixed_precision() -> None:
    from dsl.tasks.image_segmentation import unet

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = unet.build({"depth": 2, "base_filters": 4}, context())
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    assert model(tf.zeros([2, 16, 16, 3])).shape == (2, 16, 16, 4)
    assert model(tf.zeros([1, 8, 12, 3])).shape == (1, 8, 12, 4)
    assert model.output.dtype == tf.float32
    assert {"encoder_1_conv_1", "encoder_1_batch_normalization_1", "decoder_1_concat", "logits"} <= {layer.name for layer in model.layers}


@pytest.mark.parametrize("crop, match", [
    (None, r"network.depth: .* divisible by 2\*\*3 = 8, but inputter.image_shape is 20x20"),
    ([12, 16], "but augmenter.crop_size is 12x16"),
])
def test_unet_refuses_sizes_it_cannot_halve(crop: list[int] | None, match: str) -> None:
    from dsl.tasks.image_segmentation import unet

    shape = (20, 20, 3) if not crop else (16, 16, 3)
    with pytest.raises(DslError, match=match):
        unet.build({"depth": 3}, context(image_shape=shape, crop_size=crop))


@pytest.mark.parametrize("stride", [8, 32])
def test_fcn_gives_logits_at_input_resolution(stride: int) -> None:
    from dsl.tasks.image_segmentation import fcn

    model = fcn.build({"backbone": "MobileNetV2", "output_stride": stride}, context(image_shape=(32, 32, 3)))
    assert model(tf.zeros([2, 32, 32, 3])).shape == (2, 32, 32, 4) and model.output.dtype == tf.float32
    assert ("score_8" in {layer.name for layer in model.layers}) == (stride == 8)


def test_fcn_refuses_a_training_crop_of_another_size() -> None:
    from dsl.tasks.image_segmentation import fcn

    with pytest.raises(DslError, match=r"augmenter\.crop_size: fcn is built for the inputter.s image shape 32x32"):
        fcn.build({}, context(image_shape=(32, 32, 3), crop_size=[16, 16]))


# ------------------------------------------------------------------------------------- modeler
def modeler(**params: Any) -> Any:
    from dsl.tasks.image_segmentation.modeler import build

    return build(params, context())


def test_loss_is_the_mean_over_counted_pixels_and_ignores_ignore_label() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 4, 4)).astype(np.float32)
    masks = rng.integers(0, 4, (2, 4, 4)).astype(np.int32)
    masks[0, 0, :] = 255
    model = tf.keras.Sequential()
    loss = float(modeler().loss(tf.constant(masks), tf.constant(logits), model)["loss"])
    counted = masks != 255
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(np.take_along_axis(log_softmax, np.where(counted, masks, 0)[..., None], -1)[..., 0][counted])
    assert loss == pytest.approx(expected, rel=1e-5)
    changed = logits.copy()
    changed[0, 0, :] += 100.0  # what the network says at ignored pixels does not matter
    assert float(modeler().loss(tf.constant(masks), tf.constant(changed), model)["loss"]) == pytest.approx(loss, rel=1e-6)


def test_class_weights_scale_each_class_and_must_be_one_per_class() -> None:
    logits = tf.zeros([1, 2, 2, 4])  # cross-entropy log(4) at every pixel
    masks = tf.constant([[[0, 1], [1, 255]]])
    loss = modeler(class_weights=[1.0, 3.0, 1.0, 1.0]).loss(masks, logits, tf.keras.Sequential())["loss"]
    assert float(loss) == pytest.approx(np.log(4) * (1 + 3 + 3) / 3, rel=1e-6)
    with pytest.raises(DslError, match=r"modeler\.class_weights: 3 weights for 4 classes"):
        modeler(class_weights=[1.0, 2.0, 3.0])


def test_metrics_on_a_known_example_ignore_ignore_label() -> None:
    metrics = modeler().metrics("val")
    masks = tf.constant([[[0, 0, 1, 1, 255]]])
    predicted = tf.constant([[[0, 1, 1, 1, 2]]])  # the ignored pixel's prediction must not count
    logits = tf.one_hot(predicted, 4)
    for metric in metrics.values():
        metric.update_state(masks, logits)
    values = {name: float(metric.result()) for name, metric in metrics.items()}
    # class 0: TP 1, FN 1 -> 1/2; class 1: TP 2, FP 1 -> 2/3; classes 2, 3: never seen -> out of the mean, 0.
    assert values == pytest.approx({"mean_iou": (1 / 2 + 2 / 3) / 2, "pixel_accuracy": 3 / 4,
                                    "iou_0": 1 / 2, "iou_1": 2 / 3, "iou_2": 0.0, "iou_3": 0.0})
    metrics["mean_iou"].reset_state()
    assert float(metrics["pixel_accuracy"].result()) == 0.0


def test_outputs_name_what_a_callback_may_monitor() -> None:
    from dsl.tasks.image_segmentation.modeler import outputs

    assert outputs({})["val"] == ["loss", "mean_iou", "pixel_accuracy"]
    assert outputs({"class_weights": [1, 2]})["val"][-2:] == ["iou_0", "iou_1"]
    assert outputs({}, {"inputter": {"num_classes": 3}})["val"][-3:] == ["iou_0", "iou_1", "iou_2"]
    named = {"inputter": {"num_classes": 3, "class_names": ["background", "road sign", "car"]}}
    assert outputs({}, named)["val"][-3:] == ["iou_background", "iou_road_sign", "iou_car"]
    assert outputs({})["train"][-1] == "learning_rate"


def test_record_writes_the_mask_and_overlay_at_the_input_size(tmp_path: Path) -> None:
    picture = tmp_path / "photo.png"
    Image.fromarray(np.full((8, 6, 3), 100, np.uint8)).save(picture)
    mask = np.zeros((4, 3), np.int32)
    mask[:, 2] = 1
    record = modeler().record({"image": str(picture)}, {"mask": mask[None]}, np.zeros((4, 3, 3), np.float32),
                              {"out": str(tmp_path / "out"), "overlay": True})
    written = np.asarray(Image.open(record["mask"]))
    assert record["mask"].endswith("out/photo.png") and written.shape == (8, 6)
    assert (written[:, 4:] == 1).all() and (written[:, :4] == 0).all()
    assert Image.open(record["overlay"]).size == (6, 8) and record["size"] == [8, 6]
    assert record["classes"] == {"0": pytest.approx(2 / 3), "1": pytest.approx(1 / 3), "2": 0.0, "3": 0.0}
    json.dumps(record)


def test_two_inputs_of_one_name_get_a_mask_file_each(tmp_path: Path) -> None:
    options = {"out": str(tmp_path / "out"), "overlay": False}
    written = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        picture = tmp_path / folder / "0.png"
        Image.fromarray(np.full((4, 4, 3), 100, np.uint8)).save(picture)
        written.append(modeler().record({"image": str(picture)}, {"mask": np.zeros((1, 4, 4), np.int32)},
                                        np.zeros((4, 4, 3), np.float32), options)["mask"])
    assert [Path(path).name for path in written] == ["0.png", "0-2.png"]


# ------------------------------------------------------------------------- through the real CLI
SMALL = ["inputter.image_shape=[32, 32, 3]", "inputter.batch_size=8", "inputter.shuffle_buffer=64",
         "network.depth=2", "runner.max_epochs=6", "deterministic=true",
         "callbacks[5].every_n_epochs=null", "callbacks[5].every_n_iters=1", "callbacks[5].max_to_keep=100"]


def sets(run: Path, *more: str) -> list[str]:
    found = []
    for setting in [*SMALL, f"runner.model_dir={run}", *more]:
        found += ["--set", setting]
    return found


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shapes")
    dslrun("data", "synthetic-segmentation", "--out", str(out), "--num-train", "64", "--num-val", "32",
           "--image-size", "32")
    return out


def with_data(shapes: Path) -> dict[str, str]:
    return {**ENV, "DATA_DIR": str(shapes)}


def run_cli(shapes: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env=with_data(shapes), timeout=300)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def trained(shapes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    run_cli(shapes, str(PIPELINE), *sets(run))
    return run


@pytest.mark.slow
def test_the_shipped_pipeline_learns_and_eval_agrees(shapes: Path, trained: Path) -> None:
    val = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    val = [record for record in val if record.get("mode") == "val"]
    # Background everywhere scores about 0.8 / 4 = 0.2 (the other classes' IoU is 0).
    assert val[-1]["mean_iou"] > 0.45 and val[-1]["mean_iou"] > val[0]["mean_iou"], val
    evaluated = json.loads(run_cli(shapes, "eval", str(PIPELINE), *sets(trained)).stdout.splitlines()[-1])
    assert evaluated["mean_iou"] == pytest.approx(val[-1]["mean_iou"], abs=1e-6)
    # Named by the shipped pipeline's class_names.
    assert {"iou_background", "iou_disc", "iou_square", "iou_triangle"} <= set(evaluated)


@pytest.mark.slow
def test_predict_writes_a_mask_png_and_an_overlay(shapes: Path, trained: Path, tmp_path: Path) -> None:
    image = shapes / "eval" / "images" / "00000.png"
    result = run_cli(shapes, "predict", str(PIPELINE), str(image), "--out", str(tmp_path), "--overlay", "--color",
                     *sets(trained))
    record = json.loads(result.stdout.splitlines()[-1])
    assert record["image"] == str(image) and record["mask"] == str(tmp_path / "00000.png")
    mask = np.asarray(Image.open(record["mask"]))
    truth = np.asarray(Image.open(shapes / "eval" / "masks" / "00000.png"))
    assert mask.shape == (32, 32) and mask.max() < 4 and Image.open(record["overlay"]).mode == "RGB"
    assert (mask == truth).mean() > 0.8
    assert sum(record["classes"].values()) == pytest.approx(1.0, abs=1e-5) and "disc" in record["classes"]
    # --color: the same class indices in a palette PNG, which a viewer shows in the overlay's colours.
    colored = Image.open(record["color"])
    assert record["color"] == str(tmp_path / "00000_color.png") and colored.mode == "P"
    np.testing.assert_array_equal(np.asarray(colored), mask)
    assert colored.convert("RGB").getpixel((0, 0)) == tuple(palette(4)[mask[0, 0]])


@pytest.mark.slow
def test_export_serves_masks_from_pixels_and_from_png_bytes(shapes: Path, trained: Path, tmp_path: Path) -> None:
    run_cli(shapes, "export", str(PIPELINE), "--out", str(tmp_path / "saved"), *sets(trained))
    served = tf.saved_model.load(str(tmp_path / "saved"))
    files = sorted((shapes / "eval" / "images").glob("*.png"))[:3]
    pixels = tf.stack([tf.io.decode_png(path.read_bytes(), 3) for path in files])
    from_pixels = served.signatures["serving_default"](images=tf.cast(pixels, tf.float32) / 255.0)["mask"]
    from_bytes = served.signatures["serving_bytes"](image_bytes=tf.constant([p.read_bytes() for p in files]))["mask"]
    assert from_pixels.dtype == tf.int32 and from_pixels.shape == (3, 32, 32)
    np.testing.assert_array_equal(from_pixels.numpy(), from_bytes.numpy())


@pytest.mark.slow
def test_resume_after_sigkill_ends_bit_identical(shapes: Path, trained: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [*DSLRUN, str(PIPELINE), *sets(run)]
    sigkill_when(args, run / "checkpoints" / "ckpt-12.index", with_data(shapes), timeout=180)  # mid-epoch 2 (8 an epoch)
    result = run_cli(shapes, str(PIPELINE), *sets(run))
    assert "at step " in result.stderr
    reference, resumed = (tf.train.load_checkpoint(str(r / "checkpoints" / "ckpt-48")) for r in (trained, run))
    names = [name for name, _ in tf.train.list_variables(str(trained / "checkpoints" / "ckpt-48"))]
    differing = [n for n in names if not np.array_equal(reference.get_tensor(n), resumed.get_tensor(n))]
    assert not differing, differing
