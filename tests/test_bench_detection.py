"""P6's hand-written detection reference (bench/detection_reference.py) trains the detector dslrun
does: the same anchors, and on real padded batches the same loss as the object_detection modeler,
so the benchmark compares machinery, not two different tasks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from detection_reference import reference

from dsl.language.context import BuildContext
from dsl.tasks.object_detection._synthetic_data import DetectionSpec, write


def test_the_keras_reference_loss_is_the_modelers_on_a_real_batch(tmp_path: Path) -> None:
    from dsl.engine.compiler import component_facts
    from dsl.language.resolved import Component
    from dsl.tasks.object_detection.modeler import PARAMS
    from dsl.tasks.object_detection.modeler import build as modeler
    from dsl.tasks.object_detection.object_detection_csv import build as inputter

    write(tmp_path, DetectionSpec(num_train=8, num_val=1, image_size=64, seed=3))
    data = inputter({"train": str(tmp_path / "train.csv"), "num_classes": 3, "classes": ["disc", "square", "triangle"], "max_boxes": 4,
                     "image_shape": [64, 64, 3],
                     "batch_size": 8, "shuffle_buffer": 0}, None)
    images, targets = next(iter(data.dataset("train")))
    network = {"type": "retinanet", "anchors": {"levels": [3, 4], "sizes": [12, 24], "scales": [1.0, 1.5],
                                                "ratios": [1.0]}}
    settings = {name: spec["default"] for name, spec in PARAMS.items() if "default" in spec}
    context = BuildContext(image_shape=(64, 64, 3), num_classes=3)
    context.learn(component_facts("network", Component.from_resolved(network)))  # the network's anchors, as the compiler hands them on
    ours = modeler(settings, context)
    encoder, loss = reference({"network": network, "modeler": settings}, (64, 64, 3), 3)
    outputs = tf.constant(np.random.default_rng(0).normal(size=(8, len(ours.anchors), 7)), tf.float32)
    _, y_true = encoder.encode_batch(images, targets)
    assert int(tf.reduce_sum(tf.cast(y_true[..., 4] >= 0, tf.int32))) > 0  # positives: the box loss counts
    expected = ours.loss(targets, outputs, tf.keras.Sequential())["loss"]
    assert float(loss(y_true, outputs)) == pytest.approx(float(expected), rel=1e-5)
