"""The image_classification modeler: optimizers, schedules, loss terms, metrics, schema."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline_support import typed_pipeline

from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import lookup

tf = pytest.importorskip("tensorflow")


def modeler(params: dict | None = None, runner: dict | None = None, classes: int = 3):
    # A run of the given length; without one, a modeler built alone (no run length known).
    pipeline = typed_pipeline(runner={"max_epochs": None, **runner}) if runner else None
    context = BuildContext(pipeline=pipeline, image_shape=(4, 4, 1), num_classes=classes)
    builder = lookup("modeler", "image_classification").builder
    return builder({"type": "image_classification", **(params or {})}, context)


def rates(schedule, steps):
    return [float(schedule(tf.constant(step, tf.int64))) for step in steps]


def tiny_data(seed: int = 0):
    """48 images of 4x4: the class (0, 1, 2) sets which third of the image is bright."""
    rng = np.random.default_rng(seed)
    labels = np.arange(48) % 3
    images = rng.uniform(0.0, 0.2, size=(48, 4, 4, 1)).astype(np.float32)
    for index, label in enumerate(labels):
        images[index, :, label : label + 2, 0] += 0.8
    return tf.constant(images), tf.constant(labels, tf.int32)


def tiny_model():
    inputs = tf.keras.Input((4, 4, 1))
    x = tf.keras.layers.Flatten(name="flatten")(inputs)
    x = tf.keras.layers.Dense(8, activation="relu", name="hidden")(x)
    x = tf.keras.layers.BatchNormalization(name="hidden_batch_normalization")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(3, name="logits")(x))


# Optimizers -------------------------------------------------------------------------------

OPTIMIZER_CASES = [
    ({"type": "sgd", "learning_rate": 0.5}, tf.keras.optimizers.SGD, {"momentum": 0.0, "nesterov": False}),
    ({"type": "momentum"}, tf.keras.optimizers.SGD, {"momentum": 0.9, "nesterov": False}),
    ({"type": "nesterov", "momentum": 0.8}, tf.keras.optimizers.SGD, {"momentum": 0.8, "nesterov": True}),
    ({"type": "adam", "learning_rate": 0.02}, tf.keras.optimizers.Adam, {"beta_1": 0.9, "beta_2": 0.999}),
    ({"type": "adamw", "learning_rate": 0.02}, tf.keras.optimizers.AdamW, {"weight_decay": 0.004}),
    (
        {"type": "rmsprop", "learning_rate": 0.01, "clipnorm": 1.0},
        tf.keras.optimizers.RMSprop,
        {"rho": 0.9, "clipnorm": 1.0},
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("config, cls, expected", OPTIMIZER_CASES, ids=[c[0]["type"] for c in OPTIMIZER_CASES])
def test_each_optimizer_trains_a_tiny_model(config, cls, expected):
    tf.keras.utils.set_random_seed(1)
    m = modeler({"optimizer": config, "weight_decay": 1e-4})
    model = tiny_model()
    optimizer = m.optimizer(steps_per_epoch=1)
    assert type(optimizer) is cls
    settings = optimizer.get_config()
    assert {key: settings[key] for key in expected} == pytest.approx(expected)
    images, labels = tiny_data()

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            losses = m.loss(labels, model(images, training=True), model)
        grads = tape.gradient(losses["loss"], model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return losses["loss"]

    first = float(step())
    for _ in range(30):
        last = float(step())
    assert last < 0.7 * first, (first, last)


def test_adamw_decay_skips_the_same_variables_as_l2():
    model = tiny_model()
    optimizer = modeler({"optimizer": {"type": "adamw", "learning_rate": 0.1, "weight_decay": 0.5}}).optimizer(1)
    before = {v.name: v.numpy().copy() for v in model.trainable_variables}
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
    # With zero gradients only the decoupled decay moves a variable.
    for v in model.trainable_variables:
        decayed = not np.allclose(before[v.name], v.numpy())
        assert decayed == v.name.endswith("kernel:0"), v.name


def test_scale_multiplies_the_base_rate_and_settings_have_type_defaults():
    m = modeler({"optimizer": {"type": "rmsprop"}})
    assert m.params["optimizer"] == {
        "type": "rmsprop", "learning_rate": 0.001, "momentum": 0.0, "epsilon": 1e-7, "rho": 0.9, "clipnorm": None,
    }  # fmt: skip
    assert rates(m.learning_rate(10, scale=4.0), [0]) == pytest.approx([0.004])
    default = modeler().params["optimizer"]
    assert default == {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9, "clipnorm": None}


def test_a_setting_foreign_to_the_type_is_an_error():
    with pytest.raises(DslError, match=r"modeler\.optimizer\.momentum: not a setting of the adam optimizer"):
        modeler({"optimizer": {"type": "adam", "momentum": 0.9}})
    with pytest.raises(DslError, match=r"modeler\.lr_schedule\.boundaries: not a setting of the cosine"):
        modeler({"lr_schedule": {"type": "cosine", "boundaries": [3]}})
    with pytest.raises(DslError, match=r"modeler\.lr_schedule\.decay_epochs: required by the exponential"):
        modeler({"lr_schedule": {"type": "exponential"}})
    with pytest.raises(DslError, match=r"modeler\.optimizer\.type: unknown optimizer 'nadam'"):
        modeler({"optimizer": {"type": "nadam"}})


# Schedules ----------------------------------------------------------------------------------


def test_piecewise_boundaries_are_epochs_and_values_are_factors():
    m = modeler({"lr_schedule": {"type": "piecewise", "boundaries": [2, 4], "values": [1.0, 0.1, 0.01]}})
    schedule = m.learning_rate(steps_per_epoch=10)  # boundaries at steps 20 and 40
    assert rates(schedule, [0, 19, 20, 39, 40, 1000]) == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_warmup_rises_linearly_then_piecewise_counts_from_the_start():
    m = modeler(
        {
            "lr_schedule": {
                "type": "piecewise", "boundaries": [1], "values": [1.0, 0.1],
                "warmup_epochs": 0.5, "warmup_start_factor": 0.2,
            }
        }
    )  # fmt: skip
    schedule = m.learning_rate(steps_per_epoch=10)  # warmup 5 steps
    expected = [0.1 * (0.2 + 0.8 * s / 5) for s in range(5)] + [0.1, 0.1, 0.01]
    assert rates(schedule, [0, 1, 2, 3, 4, 5, 9, 10]) == pytest.approx(expected)


def test_cosine_decays_after_warmup_over_the_rest_of_the_run():
    m = modeler(
        {"lr_schedule": {"type": "cosine", "alpha": 0.1, "warmup_epochs": 1}},
        runner={"max_epochs": 10},
    )
    schedule = m.learning_rate(steps_per_epoch=10)  # 100 steps: 10 warmup, 90 cosine
    cosine = [0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t / 90))) for t in (0, 45, 90)]
    assert rates(schedule, [0, 5, 10, 55, 100, 150]) == pytest.approx([0.0, 0.05, *cosine, 0.01], abs=1e-7)
    assert cosine[1] == pytest.approx(0.055)
    by_iters = modeler({"lr_schedule": {"type": "cosine"}}, runner={"max_iters": 40}).learning_rate(7)
    assert rates(by_iters, [20, 40]) == pytest.approx([0.05, 0.0], abs=1e-7)
    fixed = modeler({"lr_schedule": {"type": "cosine", "decay_epochs": 2}}).learning_rate(10)
    assert rates(fixed, [10, 20, 30]) == pytest.approx([0.05, 0.0, 0.0], abs=1e-7)


def test_exponential_smooth_and_staircase():
    smooth_config = {"type": "exponential", "decay_epochs": 2, "decay_rate": 0.5}
    smooth = modeler({"lr_schedule": smooth_config}).learning_rate(10)
    assert rates(smooth, [0, 10, 20, 40]) == pytest.approx([0.1, 0.1 * 0.5**0.5, 0.05, 0.025])
    stairs = modeler(
        {"lr_schedule": {"type": "exponential", "decay_epochs": 2, "decay_rate": 0.5, "staircase": True}}
    ).learning_rate(10)
    assert rates(stairs, [0, 10, 19, 20, 40]) == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.025])


def test_constant_schedule_needs_no_epoch_length():
    assert rates(modeler().learning_rate(None), [0, 10**6]) == pytest.approx([0.1, 0.1])
    with pytest.raises(DslError, match=r"lr_schedule\.boundaries: .*steps per epoch is unknown"):
        modeler({"lr_schedule": {"type": "piecewise", "boundaries": [1], "values": [1, 0.1]}}).learning_rate(None)
    with pytest.raises(DslError, match=r"lr_schedule\.decay_epochs: null means"):
        modeler({"lr_schedule": {"type": "cosine"}}).learning_rate(10)
    with pytest.raises(DslError, match=r"lr_schedule\.values: .*2 boundaries needs 3 values"):
        modeler({"lr_schedule": {"type": "piecewise", "boundaries": [1, 2], "values": [1, 0.1]}}).learning_rate(10)


@pytest.mark.parametrize(
    "schedule_config",
    [
        {"type": "piecewise", "boundaries": [1, 3], "values": [1.0, 0.5, 0.25], "warmup_epochs": 0.5},
        {"type": "cosine", "alpha": 0.05, "decay_epochs": 3, "warmup_epochs": 1, "warmup_start_factor": 0.1},
        {"type": "exponential", "decay_epochs": 1, "decay_rate": 0.7, "staircase": True},
    ],
    ids=["piecewise", "cosine", "exponential"],
)
def test_schedule_round_trips_through_its_config(schedule_config):
    schedule = modeler({"lr_schedule": schedule_config}).learning_rate(steps_per_epoch=4, scale=2.0)
    steps = list(range(0, 20, 3))
    clone = type(schedule).from_config(schedule.get_config())
    assert rates(clone, steps) == pytest.approx(rates(schedule, steps))
    rebuilt = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(schedule))
    assert rates(rebuilt, steps) == pytest.approx(rates(schedule, steps))


def test_optimizer_config_with_the_schedule_round_trips():
    m = modeler({"lr_schedule": {"type": "piecewise", "boundaries": [1], "values": [1.0, 0.1]}})
    config = m.optimizer(steps_per_epoch=5).get_config()
    assert config["learning_rate"]["registered_name"] == "dslrun>LearningRate"
    rebuilt = tf.keras.optimizers.SGD.from_config(copy.deepcopy(config))  # from_config edits its argument
    assert rebuilt.get_config()["learning_rate"] == config["learning_rate"]
    schedule = tf.keras.optimizers.schedules.deserialize(rebuilt.get_config()["learning_rate"])
    assert rates(schedule, [0, 4, 5]) == pytest.approx([0.1, 0.1, 0.01])


# Loss ---------------------------------------------------------------------------------------


def test_l2_skips_normalisation_and_bias_variables():
    from dsl.tasks.image_classification.resnet_cifar import build as resnet

    model = resnet({"depth": 20}, BuildContext(image_shape=(8, 8, 3), num_classes=10))
    chosen = modeler({"weight_decay": 1e-4}).l2_variables(model)
    # 19 convolutions + 2 projection shortcuts + the logits kernel; 21 batch norms and 1 bias skipped.
    assert len(chosen) == 22 and all(v.name.endswith("kernel:0") for v in chosen)
    assert len(model.trainable_variables) == 22 + 2 * 21 + 1
    lambda_style = modeler({"weight_decay": 1e-4, "skip_l2_loss_vars": ["batch_normalization", "bias"]})
    assert [v.name for v in lambda_style.l2_variables(model)] == [v.name for v in chosen]


def test_default_skip_patterns_match_other_naming_styles():
    inputs = tf.keras.Input((4, 4, 1))
    x = tf.keras.layers.Conv2D(2, 3, name="conv1")(inputs)  # kernel + bias
    x = tf.keras.layers.BatchNormalization(name="conv1_bn")(x)  # ResNet50 style
    x = tf.keras.layers.BatchNormalization(name="expanded_conv_BN")(x)  # MobileNetV2 style
    x = tf.keras.layers.LayerNormalization(name="stem_layernorm")(x)  # ConvNeXt style
    model = tf.keras.Model(inputs, x)
    assert [v.name for v in modeler().l2_variables(model)] == ["conv1/kernel:0"]


def test_l2_loss_value_and_cache():
    model = tiny_model()
    m = modeler({"weight_decay": 0.01})
    images, labels = tiny_data()
    losses = m.loss(labels, model(images), model)
    kernels = [model.get_layer(n).kernel.numpy() for n in ("hidden", "logits")]
    expected = 0.01 * sum(float(np.sum(k**2)) / 2 for k in kernels)
    assert float(losses["l2_loss"]) == pytest.approx(expected, rel=1e-5)
    assert float(losses["loss"]) == pytest.approx(float(losses["cross_entropy"]) + expected, rel=1e-5)
    assert m.l2_variables(model) is m.l2_variables(model)  # chosen once, not per step
    assert float(modeler().loss(labels, model(images), model)["l2_loss"]) == 0.0


def test_label_smoothing_matches_a_hand_computed_loss():
    logits = tf.constant([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]])
    labels = tf.constant([0, 1])
    log_p = logits.numpy() - np.log(np.exp(logits.numpy()).sum(axis=1, keepdims=True))
    plain = -np.mean([log_p[0, 0], log_p[1, 1]])
    # smoothing 0.3 over 3 classes: targets 0.8 for the label, 0.1 for each other class.
    targets = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1]])
    smoothed = -np.mean(np.sum(targets * log_p, axis=1))
    got_plain = modeler().loss(labels, logits, tiny_model())
    got_smoothed = modeler({"label_smoothing": 0.3}).loss(labels, logits, tiny_model())
    assert float(got_plain["cross_entropy"]) == pytest.approx(plain, rel=1e-6)
    assert float(got_smoothed["cross_entropy"]) == pytest.approx(smoothed, rel=1e-6)
    assert smoothed > plain  # smoothing penalises the confident correct logit


# Metrics and predictions --------------------------------------------------------------------


def test_metrics_names_and_values():
    metrics = modeler({"top_k": [2]}, classes=4).metrics("val")
    assert list(metrics) == ["accuracy", "top_2_accuracy", "macro_f1"]
    assert [metric.name for metric in metrics.values()] == ["accuracy", "top_2_accuracy", "macro_f1"]
    logits = tf.constant([[3.0, 2.0, 0.0, 0.0], [3.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 5.0]])
    labels = tf.constant([0, 1, 2])
    for metric in metrics.values():
        metric.update_state(labels, logits)
    assert float(metrics["accuracy"].result()) == pytest.approx(1 / 3)
    assert float(metrics["top_2_accuracy"].result()) == pytest.approx(1.0)
    # Predicted 0, 0, 3 for 0, 1, 2: class 0 has precision 1/2, recall 1, F1 2/3; the others 0.
    assert float(metrics["macro_f1"].result()) == pytest.approx((2 / 3) / 4)
    report = modeler({"top_k": [2]}, classes=4).report(metrics)
    assert report["confusion_matrix"] == [[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert report["per_class"][0] == {"class": 0, "name": "0", "precision": 0.5, "recall": 1.0, "f1": 0.666667,
                                      "support": 1}
    assert "macro_f1" not in modeler({"top_k": [2]}, classes=4).metrics("train")
    assert modeler({"top_k": [2]}, classes=4).metrics("train")["accuracy"] is not metrics["accuracy"]
    with pytest.raises(DslError, match=r"modeler\.top_k: top_5_accuracy is always 1 with 5 classes"):
        modeler({"top_k": [5]}, classes=5)


def test_predictions_give_classes_and_probabilities():
    out = modeler().predictions(tf.constant([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]]))
    assert out["classes"].dtype == tf.int32
    assert out["classes"].numpy().tolist() == [1, 0]
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), [1.0, 1.0], rtol=1e-6)


# Schema -------------------------------------------------------------------------------------


def _walk_properties(schema, path="modeler"):
    if isinstance(schema, dict):
        for name, spec in schema.get("properties", {}).items():
            yield f"{path}.{name}", spec
            yield from _walk_properties(spec, f"{path}.{name}")
        for key in ("allOf", "anyOf", "oneOf"):
            for index, sub in enumerate(schema.get(key, [])):
                yield from _walk_properties(sub, f"{path}[{index}]")
        for key in ("if", "then", "items"):
            if key in schema:
                yield from _walk_properties(schema[key], path)


def test_schema_describes_every_property_and_rejects_misplaced_keys():
    schema = lookup("modeler", "image_classification").schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for path, spec in _walk_properties(schema):
        if not path.endswith(".type") or "description" in spec or "const" not in spec:
            assert spec.get("description"), path
    validator_class = jsonschema.Draft202012Validator
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    good = [
        {},
        {"optimizer": {"type": "adamw", "weight_decay": 0.01, "clipnorm": 1.0}},
        {"optimizer": {"learning_rate": 0.05, "momentum": 0.8}},  # no type: momentum
        {"lr_schedule": {"type": "piecewise", "boundaries": [91, 136, 182], "values": [1, 0.1, 0.01, 0.001]}},
        {"lr_schedule": {"type": "cosine", "decay_epochs": None, "warmup_epochs": 0.5}},
        {"top_k": [5], "label_smoothing": 0.1, "weight_decay": 2e-4},
    ]
    bad = [
        {"optimizer": {"type": "adam", "momentum": 0.9}},
        {"optimizer": {"type": "sgd", "momentum": 0.9}},
        {"optimizer": {"beta_1": 0.9}},  # momentum by default
        {"optimizer": {"type": "adam", "weight_decay": 0.1}},
        {"lr_schedule": {"type": "cosine", "boundaries": [1]}},
        {"lr_schedule": {"type": "piecewise"}},
        {"lr_schedule": {"type": "exponential", "decay_epochs": None}},
        {"skip_l2_loss_vars": ["(unclosed"]},
        {"top_k": [1]},
        {"label_smoothing": 1.5},
        {"optimizer": {"type": "nadam"}},
    ]
    for params in good:
        assert validator.is_valid({"type": "image_classification", **params}), params
    for params in bad:
        assert not validator.is_valid({"type": "image_classification", **params}), params
    for name, spec in schema["properties"].items():
        if name != "type":
            assert validator.is_valid({"type": "image_classification", name: spec["default"]}), name


def test_modeler_module_does_not_import_tensorflow():
    code = "import sys, dsl.tasks.image_classification.modeler; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_schedule_a_pipeline_names_is_one_the_keras_schedule_computes() -> None:
    from dsl.modelers._learning_rate import KINDS
    from dsl.modelers._schedules import SCHEDULES

    assert set(SCHEDULES) == set(KINDS)


def test_another_modeler_shares_the_optimizer_and_schedule_settings() -> None:
    from dsl.modelers._optimizers import fill_optimizer, optimizer_param
    from dsl.modelers._schedules import schedule_param

    schema = {"type": "object", "properties": {"optimizer": optimizer_param("adam"), "lr_schedule": schedule_param()}}
    assert schema["properties"]["optimizer"]["default"] == fill_optimizer({}, "adam")
    assert fill_optimizer({}, "adam")["learning_rate"] == 0.001
    jsonschema.validate({"optimizer": {"type": "momentum", "momentum": 0.5}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"optimizer": {"type": "adam", "momentum": 0.5}}, schema)


def test_per_class_values_for_the_val_record_are_named_by_class_and_optional():
    context = BuildContext(image_shape=(4, 4, 1), num_classes=3,
                           class_names=["cat", "hot dog", "dog"])
    builder = lookup("modeler", "image_classification").builder
    classifier = builder({"type": "image_classification"}, context)
    metrics = classifier.metrics("val")
    metrics["macro_f1"].update_state(tf.constant([0, 1, 2, 2]), tf.constant(np.eye(3, dtype=np.float32)[[0, 1, 1, 2]]))
    report = classifier.report(metrics)
    values = classifier.report_outputs(report)
    assert list(values)[:3] == ["precision_cat", "precision_hot_dog", "precision_dog"]
    assert values["recall_dog"] == 0.5 and values["precision_hot_dog"] == 0.5 and values["support_dog"] == 2
    assert values["f1_cat"] == 1.0 and len(values) == 12
    # Above per_class_metrics classes the record keeps macro_f1 only, and nothing is drawn.
    lean = builder({"type": "image_classification", "per_class_metrics": 2}, context)
    assert lean.report_outputs(report) == {} and lean.write_report(report, Path("unused"), "val", "t") == {}


def test_the_confusion_matrix_is_counted_example_by_example_as_tensorflow_counts_it() -> None:
    """ConfusionF1 scatters one count per example (not a dense matrix per batch): the same matrix."""
    from dsl.modelers._class_report import ConfusionF1

    rng = np.random.default_rng(0)
    metric = ConfusionF1(50)
    expected = np.zeros((50, 50))
    for _ in range(3):
        labels = rng.integers(0, 50, 256)
        logits = rng.normal(size=(256, 50)).astype(np.float32)
        logits[:128, 7] += 10.0  # many repeated (label, 7) pairs in one batch
        metric.update_state(tf.constant(labels), tf.constant(logits))
        expected += tf.math.confusion_matrix(labels, logits.argmax(axis=1), 50, dtype=tf.float64).numpy()
    assert np.array_equal(metric.total_cm.numpy(), expected) and expected.sum() == 768
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside 0\.\.num_classes-1"):
        metric.update_state(tf.constant([50]), tf.constant(np.ones((1, 50), np.float32)))


def test_a_classifier_that_predicts_one_class_is_said_to_have_collapsed_once() -> None:
    """A fine-tune collapsed to one class (val accuracy 0.20 of 5 classes) and nothing said so: the
    report's confusion matrix does, once a run, when it persists or ends the run."""
    from types import SimpleNamespace

    from dsl.engine.phase_report import PhaseReport
    from dsl.modelers._class_report import class_report

    built = modeler(classes=3)
    collapsed = class_report(np.array([[4, 0, 0], [5, 0, 0], [6, 0, 0]]), ["cat", "dog", "fox"])
    healthy = class_report(np.array([[4, 0, 0], [1, 3, 1], [0, 0, 6]]), ["cat", "dog", "fox"])
    assert built.report_warnings(healthy) == []
    assert built.report_warnings(class_report(np.array([[4, 0], [0, 0]]), None)) == []  # the data has one class
    [warning] = built.report_warnings(collapsed)
    assert warning.startswith("every prediction is class 'cat' though the data holds 3 classes: the model has collapsed")
    notices: list[str] = []

    def phases(*reports: dict, max_epochs: int = 10) -> list[str]:
        notices.clear()
        runner = SimpleNamespace(placement=SimpleNamespace(is_chief=True), notice=notices.append, max_epochs=max_epochs,
                                 summary_writer=lambda name: None, model_dir=None)
        report = PhaseReport(SimpleNamespace(report_warnings=built.report_warnings))
        for epoch, last in enumerate(reports, start=1):
            runner.epoch, runner.step, report.last = epoch, 40 * epoch, last
            report.finish(runner, "val")
        return list(notices)

    # Said when two val phases in a row show it, once: a young network's first phase often does.
    assert phases(collapsed, collapsed, collapsed) == [f"warning: val, step 80: {warning}"]
    assert phases(collapsed, healthy, collapsed, healthy) == []
    # ... or when the run's last phase does.
    assert phases(healthy, collapsed, max_epochs=2) == [f"warning: val, step 80: {warning}"]
    # Said again when the run ends collapsed after saying it earlier (trial B14 heard of it at step 12 only).
    assert phases(collapsed, collapsed, healthy, collapsed, max_epochs=4) == [
        f"warning: val, step 80: {warning}", f"warning: val, step 160 (still, at the run's end): {warning}"]
    # Nearly every prediction one class (171 of 173 'five' in the trial) is a collapse too; a class
    # most of the data holds, predicted for nearly everything, is not.
    nearly = class_report(np.array([[6, 0, 0], [7, 0, 0], [6, 0, 1]]), ["cat", "dog", "fox"])
    assert built.report_warnings(nearly)[0].startswith("19 of 20 predictions are class 'cat' though the data holds 3")
    assert built.report_warnings(class_report(np.array([[90, 0], [5, 5]]), None)) == []
