"""`dslrun validate` on the task pipelines: the cross-section rules it can check from the YAML
alone, before any training — the sections work on one kind of batch, the outputs a callback
monitors are ones the task has, and the facts shared between sections agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.cli import main

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
SEGMENTATION = str(PIPELINES / "segmentation.yaml")
TEXT = str(PIPELINES / "text_classification.yaml")


def validate(path: str, *settings: str) -> tuple[int, str]:
    args = ["validate", path]
    for setting in settings:
        args += ["--set", setting]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("path", [SEGMENTATION, TEXT])
def test_the_shipped_task_pipelines_are_valid(path: str) -> None:
    code, output = validate(path)
    assert code == 0, output


@pytest.mark.parametrize(("setting", "expected"), [
    ("network={type: resnet_cifar, depth: 20}",
     "network 'resnet_cifar' works on image -> one class per example, but inputter 'image_segmentation_csv'"),
    ("modeler={type: image_classification}",
     "modeler 'image_classification' works on image -> one class per example, but inputter 'image_segmentation_csv'"),
    ("augmenter={type: cifar}", "augmenter 'cifar' works on image -> one class per example"),
])
def test_a_segmentation_pipeline_refuses_classification_sections(setting: str, expected: str) -> None:
    code, output = validate(SEGMENTATION, setting)
    assert code == 1
    assert expected in output and "gives image -> a class per pixel (a mask)" in output
    assert "segmentation.yaml:" in output.splitlines()[0]  # located in the file


def test_a_classification_modeler_is_refused_beside_a_mask_network_with_the_types_that_fit() -> None:
    code, output = validate(str(PIPELINES / "quickstart.yaml"), "network={type: unet}", "network.depth=2")
    assert code == 1
    assert "network 'unet' works on image -> a class per pixel (a mask), but inputter 'image_classification_csv'" in output
    assert "network types for that:" in output and "resnet_cifar" in output


def test_a_text_pipeline_refuses_an_image_network() -> None:
    code, output = validate(TEXT, "network={type: simple_cnn}")
    assert code == 1 and "network 'simple_cnn' works on image -> one class per example" in output
    assert "gives tokens -> one class per example" in output


@pytest.mark.parametrize(("monitor", "ok"), [("val/mean_iou", True), ("val/iou_triangle", True), ("val/iou_3", False),
                                             ("val/accuracy", False)])
def test_a_callback_may_monitor_only_what_the_segmentation_task_reports(monitor: str, ok: bool) -> None:
    code, output = validate(SEGMENTATION, f"callbacks[5].save_best.monitor={monitor}")
    assert (code == 0) == ok, output
    if not ok:
        assert f"no output {monitor.split('/')[1]!r}" in output and "val/mean_iou" in output  # and what there is


def test_text_sequence_length_must_be_positive() -> None:
    code, output = validate(TEXT, "inputter.sequence_length=0")
    assert code == 1 and "inputter.sequence_length" in output
