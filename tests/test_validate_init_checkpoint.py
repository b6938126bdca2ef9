"""`dslrun validate` on init_checkpoint: the path and the patterns, located, without TensorFlow;
with TensorFlow loaded (as `validate --build` has it), the checkpoint itself is opened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.cli import main

PIPELINE = """\
version: 1
inputter:
  type: synthetic
  image_shape: [8, 8, 3]
network:
  type: mlp
modeler:
  type: image_classification
callbacks:
  - type: init_checkpoint
    path: {path}
    skip: {skip}
runner:
  max_epochs: 1
"""


def validate(tmp_path: Path, path: str, skip: str = "[head]") -> tuple[int, list[str]]:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(path=path, skip=skip))
    result = CliRunner().invoke(main, ["validate", str(pipeline)], catch_exceptions=False)
    return result.exit_code, [line for line in result.output.splitlines() if ": error: " in line or ": warning: " in line]


def test_a_missing_path_is_a_located_warning_and_a_bad_pattern_a_located_error(tmp_path: Path) -> None:
    code, lines = validate(tmp_path, str(tmp_path / "runs" / "base"))
    assert code == 0 and lines == [
        f"{tmp_path / 'p.yaml'}:11:11: warning: callbacks[0].path: '{tmp_path / 'runs' / 'base'}' does not exist "
        "(yet); the run stops with an error unless a run writes it first: train the base pipeline whose "
        "runner.model_dir it is, or fix the path"]
    code, lines = validate(tmp_path, str(tmp_path / "runs" / "base"), skip="[head, '(logits']")
    assert code == 1 and f"{tmp_path / 'p.yaml'}:12:18: error: callbacks[0].skip[1]: '(logits' is not a regular" in lines[1]


def test_a_path_that_is_no_checkpoint_is_a_located_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, lines = validate(tmp_path, str(tmp_path / "empty"))
    assert code == 1 and len(lines) == 1 and ":11:11: error: callbacks[0].path:" in lines[0]
    assert "is not a checkpoint dslrun can read" in lines[0]
    # A `checkpoint` file naming a prefix whose files were deleted.
    (tmp_path / "empty" / "checkpoint").write_text('model_checkpoint_path: "ckpt-8"\n')
    code, lines = validate(tmp_path, str(tmp_path / "empty"))
    assert code == 1 and "names " in lines[0] and "ckpt-8, whose .index is missing" in lines[0]


@pytest.mark.slow
def test_with_tensorflow_loaded_the_checkpoint_is_opened(tmp_path: Path) -> None:
    """A damaged index is found at validate when TensorFlow is there to read it."""
    (tmp_path / "ckpt-1.index").write_bytes(b"not a checkpoint index")
    (tmp_path / "p.yaml").write_text(PIPELINE.format(path=tmp_path / "ckpt-1", skip="[]"))
    code = ("import sys, tensorflow; from dsl.cli import main; "
            f"main(['validate', {str(tmp_path / 'p.yaml')!r}])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ":11:11: error: callbacks[0].path:" in result.stdout and "cannot be read as a checkpoint" in result.stdout


def test_two_phase_settings_that_cannot_work_are_located_errors(tmp_path: Path) -> None:
    text = PIPELINE.format(path=tmp_path / "base", skip="[]").replace(
        "    skip: []\n", "    unfreeze_after_epochs: 2\n    backbone_lr_multiplier: 0.1\n").replace(
        "  type: image_classification\n", "  type: image_classification\n  optimizer: {type: adam}\n").replace(
        "max_epochs: 1", "max_epochs: 3")
    (tmp_path / "p.yaml").write_text(text)
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    lines = [line for line in result.output.splitlines() if ": error: " in line]
    assert result.exit_code == 1 and len(lines) == 2, result.output
    assert ":13:28: error: callbacks[0].unfreeze_after_epochs: there is nothing to unfreeze" in lines[0]
    assert ":14:29: error: callbacks[0].backbone_lr_multiplier: " in lines[1] and "adam optimizer" in lines[1]


def test_a_second_phase_after_the_run_s_end_is_a_located_error(tmp_path: Path) -> None:
    """`unfreeze_after_epochs` at or past `runner.max_epochs` trained the head alone and never said the
    second phase did not come (a trial); it is known from the pipeline, so validate says so."""
    text = PIPELINE.format(path=tmp_path / "base", skip="[]").replace(
        "    skip: []\n", "    trainable: [head]\n    unfreeze_after_epochs: 3\n").replace("max_epochs: 1", "max_epochs: 3")
    (tmp_path / "p.yaml").write_text(text)
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 1 and [line for line in result.output.splitlines() if ": error: " in line] == [
        f"{tmp_path / 'p.yaml'}:13:28: error: callbacks[0].unfreeze_after_epochs: the layers never unfreeze: 3 is not "
        "below runner.max_epochs 3, so the run ends first; lower unfreeze_after_epochs or raise runner.max_epochs"], result.output
    (tmp_path / "p.yaml").write_text(text.replace("max_epochs: 3", "max_epochs: 4"))
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert ": error: " not in result.output, result.output


def test_an_inherited_schedule_that_has_dropped_the_rate_when_the_backbone_unfreezes_is_a_warning(tmp_path: Path) -> None:
    """Trial B15: a two-phase fine-tune that extends its base inherited `piecewise` boundaries [8]; the
    backbone unfroze after 10 epochs at a hundredth of the rate, with nothing said. The same schedule
    written in the fine-tuning file itself is taken as meant: no warning."""
    schedule = ("  optimizer: {type: momentum, learning_rate: 0.01}\n"
                "  lr_schedule: {type: piecewise, boundaries: [8], values: [1.0, 0.1]}\n")
    base = PIPELINE.format(path=tmp_path / "base", skip="[]").replace(
        "  type: image_classification\n", "  type: image_classification\n" + schedule).replace("max_epochs: 1", "max_epochs: 20")
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "tune.yaml").write_text("extends: base.yaml\ncallbacks: !merge\n  - type: init_checkpoint\n"
                                        "    trainable: [head]\n    unfreeze_after_epochs: 10\n    backbone_lr_multiplier: 0.1\n")
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "tune.yaml")], catch_exceptions=False)
    warnings = [line for line in result.output.splitlines() if "lr_schedule" in line]
    assert result.exit_code == 0 and warnings == [
        f"{tmp_path / 'tune.yaml'}:5:28: warning: callbacks[0].unfreeze_after_epochs: the backbone unfreezes after 10 "
        f"epochs, where modeler.lr_schedule (piecewise, from {tmp_path / 'base.yaml'}:10, which {tmp_path / 'tune.yaml'} "
        "extends) is down to 0.1 x the rate (0.01 x 0.1 = 0.001, times backbone_lr_multiplier 0.1: 0.0001); give "
        f"{tmp_path / 'tune.yaml'} its own modeler.lr_schedule for this run if that is not meant"], result.output
    # Unfreezing before the drop: the backbone starts at the full rate, nothing to say.
    (tmp_path / "early.yaml").write_text((tmp_path / "tune.yaml").read_text().replace("epochs: 10", "epochs: 5"))
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "early.yaml")], catch_exceptions=False)
    assert result.exit_code == 0 and "lr_schedule" not in result.output, result.output
    # The schedule in the fine-tuning file itself: meant.
    (tmp_path / "own.yaml").write_text(base.replace("    skip: []\n", "    trainable: [head]\n    unfreeze_after_epochs: 10\n"))
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "own.yaml")], catch_exceptions=False)
    assert result.exit_code == 0 and "lr_schedule" not in result.output, result.output


def test_factor_at_epoch_follows_the_schedules() -> None:
    from dsl.modelers._schedules import factor_at_epoch

    piecewise = {"type": "piecewise", "boundaries": [8, 16], "values": [1.0, 0.1, 0.01]}
    assert [factor_at_epoch(piecewise, e) for e in (0, 7, 8, 16, 30)] == [1.0, 1.0, 0.1, 0.01, 0.01]
    assert factor_at_epoch({"type": "exponential", "decay_epochs": 2, "decay_rate": 0.5}, 4) == pytest.approx(0.25)
    assert factor_at_epoch({"type": "exponential", "decay_epochs": 2, "decay_rate": 0.5, "staircase": True}, 3) == 0.5
    assert factor_at_epoch({"type": "cosine"}, 5, max_epochs=10) == pytest.approx(0.5)
    assert factor_at_epoch({"type": "cosine", "warmup_epochs": 2}, 1, max_epochs=10) is None  # in the warmup
    assert factor_at_epoch({"type": "constant"}, 50) == 1.0 and factor_at_epoch({}, 3) == 1.0
    assert factor_at_epoch({"type": "inverse_sqrt", "warmup_epochs": 1}, 3) is None


def test_a_reset_head_that_trainable_never_selects_is_a_located_error(tmp_path: Path) -> None:
    """`reset_head: true` with `trainable: [backbone]` trains around a random classifier: known from
    the pipeline alone (a trial got a run-time warning only, and exit 0)."""
    text = PIPELINE.format(path=tmp_path / "base", skip="[]").replace(
        "    skip: []\n", "    reset_head: true\n    trainable: [backbone]\n")
    (tmp_path / "p.yaml").write_text(text)
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 1 and [line for line in result.output.splitlines() if ": error: " in line] == [
        f"{tmp_path / 'p.yaml'}:13:16: error: callbacks[0].trainable: the head is reset (reset_head: true) but never "
        "trains: trainable names the backbone only; add head (trainable: [head, backbone], or drop trainable)"], result.output


BUILD_SCRIPT = """\
import sys
import tensorflow as tf
from dsl.cli import main

tf.keras.utils.set_random_seed(0)
inputs = tf.keras.Input((8, 8, 3))
outputs = tf.keras.layers.Dense(5, name=sys.argv[3] if len(sys.argv) > 3 else "other_head")(tf.keras.layers.Flatten()(inputs))
model = tf.keras.Model(inputs, outputs)
tf.train.CheckpointManager(tf.train.Checkpoint(model=model), sys.argv[1], max_to_keep=1).save(1)
main(["validate", "--build", sys.argv[2]])
"""


@pytest.mark.slow
def test_validate_build_matches_the_checkpoint_with_the_built_network(tmp_path: Path) -> None:
    """`validate --build` matches the init_checkpoint file with the network it built, by name, as
    the run will: a checkpoint of another network is one located error at the callback's path,
    found before any data is read (it used to surface seconds into the run, naming no line)."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(path=tmp_path / "other", skip="[]"))
    result = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(tmp_path / "other"), str(pipeline)],
                            capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(errors) == 1 and errors[0].startswith(f"{pipeline}:11:11: error: callbacks[0].path: "), errors
    assert "init_checkpoint" in errors[0] and "Traceback" not in result.stderr
    # A skip pattern that matches nothing is located at the skip entry (trial B9: it was at path:).
    pipeline.write_text(PIPELINE.format(path=tmp_path / "other2", skip="['^nothing/']"))
    result = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(tmp_path / "other2"), str(pipeline), "hidden_1"],
                            capture_output=True, text=True, timeout=300)  # a file that shares a layer's name
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert any(line.startswith(f"{pipeline}:12:11: error: callbacks[0].skip: init_checkpoint.skip: ['^nothing/'] match "
                               "no variable") for line in errors), errors


BASE = """\
version: 1
inputter: {{type: synthetic, num_examples: {{train: 16, val: 8}}, image_shape: [8, 8, 3], batch_size: 8}}
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
callbacks: [{{type: checkpoint}}]
runner: {{model_dir: {run}, max_iters: 1}}
"""


@pytest.mark.slow
def test_a_trainable_entry_that_matches_nothing_is_an_error_even_beside_one_that_matches(tmp_path: Path) -> None:
    """`trainable: [head, hiden_2]`: the head matches, the misspelt layer would silently stay frozen.
    validate --build says so at the line, and so does the run, before anything trains."""
    base = tmp_path / "base.yaml"
    base.write_text(BASE.format(run=tmp_path / "base"))
    assert CliRunner().invoke(main, ["run", str(base)], catch_exceptions=False).exit_code == 0
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text(f"extends: {base}\nrunner: {{model_dir: {tmp_path / 'tuned'}}}\ncallbacks:\n"
                     f"  - type: init_checkpoint\n    path: {tmp_path / 'base'}\n    reset_head: true\n"
                     "    trainable: [head, hiden_2]\n")
    built = CliRunner().invoke(main, ["validate", "--build", str(tuned)], catch_exceptions=False)
    errors = [line for line in built.output.splitlines() if ": error: " in line]
    assert built.exit_code == 1 and errors == [
        f"{tuned}:7:16: error: callbacks[0].trainable: init_checkpoint.trainable: ['hiden_2'] matches no variable "
        "of the model, so the layers it was meant for would stay frozen; write `head` or `backbone`, or a regular "
        "expression of variable names "
        "(the head's layers: logits; `dslrun show --variables` lists every name)"], built.output
    run = CliRunner().invoke(main, ["run", str(tuned)], catch_exceptions=False)
    assert run.exit_code == 1 and "['hiden_2'] matches no variable of the model" in run.output
    assert not (tmp_path / "tuned").exists()  # refused at its start: no run directory left behind
    # Trial B13: a variant that extends the fine-tuning pipeline drops reset_head and trains the head: the
    # error is at the variant's trainable line, not at the base file's path line.
    variant = tmp_path / "variant.yaml"
    variant.write_text(f"extends: {tuned}\ncallbacks: !merge\n  - type: init_checkpoint\n    reset_head: null\n"
                       "    trainable: [head]\n")
    built = CliRunner().invoke(main, ["validate", "--build", str(variant)], catch_exceptions=False)
    errors = [line for line in built.output.splitlines() if ": error: " in line]
    assert built.exit_code == 1 and len(errors) == 1, built.output
    assert errors[0].startswith(f"{variant}:5:16: error: callbacks[0].trainable: init_checkpoint.trainable without "
                                "a fresh head"), errors


def test_a_checkpoint_s_index_or_data_file_is_taken_for_its_prefix(tmp_path: Path) -> None:
    """Trial B7: `--checkpoint` took `ckpt-8.index`, `init_checkpoint.path` refused it."""
    from dsl.callbacks._init_checkpoint_check import checkpoint_problem, resolve_prefix

    (tmp_path / "ckpt-8.index").write_bytes(b"")
    (tmp_path / "ckpt-8.data-00000-of-00001").write_bytes(b"")
    prefix = str(tmp_path / "ckpt-8")
    for given in (prefix, f"{prefix}.index", f"{prefix}.data-00000-of-00001"):
        assert resolve_prefix(given) == prefix and checkpoint_problem(given) == (None, ""), given
    assert resolve_prefix(str(tmp_path / "ckpt-9.index")) is None


def _run_trained_on(run: Path, classes: list[str]) -> str:
    """A run directory as dslrun leaves one (pipeline.yaml, checkpoints/ckpt-1.index), the index
    empty: what these checks read is the run's pipeline, before TensorFlow opens anything."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ckpt-1.index").write_bytes(b"")
    (run / "pipeline.yaml").write_text(f"inputter: {{type: image_folder, classes: [{', '.join(classes)}]}}\n")
    return str(run / "checkpoints" / "ckpt-1")


NAMED = PIPELINE.replace("  type: synthetic\n  image_shape: [8, 8, 3]\n", "  type: image_classification_csv\n  train: "
                         "new/train.csv\n  val: new/eval.csv\n  image_shape: [8, 8, 3]\n  num_classes: 3\n  classes: [five, six, seven]\n")


def validate_without_tensorflow(pipeline: Path) -> subprocess.CompletedProcess[str]:
    """Plain `dslrun validate` in a process that never imports TensorFlow (the checkpoint's index,
    left empty here, is then not opened), as a user's validate runs."""
    code = f"import sys; from dsl.cli import main; main(['validate', {str(pipeline)!r}])"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=pipeline.parent)


def test_a_head_restored_from_a_run_of_other_classes_is_a_warning(tmp_path: Path) -> None:
    """Trial B8: digits 5-9 fine-tuned from a digits 0-4 run restored its classifier (as many classes)
    with only "restored 107 variables" said. Plain validate reads the base run's pipeline.yaml."""
    prefix = _run_trained_on(tmp_path / "base", ["zero", "one", "two"])
    (tmp_path / "new").mkdir()
    for name in ("train.csv", "eval.csv"):  # there, or plain validate warns that they are not
        (tmp_path / "new" / name).touch()
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f":15:11: warning: callbacks[0].path: {tmp_path / 'base'} was trained on other classes (zero, one, two), " \
           "as many as this pipeline's, so its head (classifier) is restored" in result.stdout, result.stdout
    assert "set reset_head: true for a new task" in result.stdout
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[head]"))  # the head skipped: nothing to say
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0 and "warning" not in result.stdout, result.stdout


def test_a_head_restored_for_the_same_classes_from_other_data_is_a_warning(tmp_path: Path) -> None:
    """Trial B11: a pipeline extending the base inherited its classes; digits 5-9 labelled 0-4 trained,
    predicted and exported as the base's names (zero..four) with nothing said. The same classes on
    the same train file (a longer run of the same task) say nothing."""
    prefix = _run_trained_on(tmp_path / "base", ["five", "six", "seven"])
    for folder in ("old", "new"):
        (tmp_path / folder).mkdir()
        for name in ("train.csv", "eval.csv"):
            (tmp_path / folder / name).touch()
    (tmp_path / "base" / "pipeline.yaml").write_text(
        f"inputter: {{type: image_classification_csv, train: {tmp_path / 'old' / 'train.csv'}, classes: [five, six, seven]}}\n")
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f":15:11: warning: callbacks[0].path: {tmp_path / 'base'} was trained on other data "
            f"({tmp_path / 'old' / 'train.csv'}) with the classes this pipeline names (inputter.classes, "
            f"{tmp_path / 'p.yaml'}:") in result.stdout, result.stdout
    assert "so this data's labels keep that run's meaning (label 0 is 'five')" in result.stdout
    assert "set reset_head: true and inputter.classes to their names" in result.stdout
    (tmp_path / "base" / "pipeline.yaml").write_text(
        "inputter: {type: image_classification_csv, train: new/train.csv, classes: [five, six, seven]}\n")
    result = validate_without_tensorflow(tmp_path / "p.yaml")  # the same file, relative as here: nothing to say
    assert result.returncode == 0 and "warning" not in result.stdout, result.stdout


FOLDERS = PIPELINE.replace("  type: synthetic\n  image_shape: [8, 8, 3]\n", "  type: image_folder\n  train: "
                           "{train}\n  image_shape: [8, 8, 3]\n  num_classes: 3\n")


def _class_folders(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
    return root


def test_a_head_restored_onto_other_class_folders_is_a_warning(tmp_path: Path) -> None:
    """Trial B12: image_folder in both pipelines with `classes` null, the names from the sub-folders
    (digits 0-2 for the base, 5-7 here): the base head was restored onto the new classes with no
    word. Plain validate reads both sides' folder names; the same folders say nothing."""
    base = _class_folders(tmp_path / "digits_0_2", ["0", "1", "2"])
    new = _class_folders(tmp_path / "digits_5_7", ["5", "6", "7"])
    prefix = _run_trained_on(tmp_path / "base", [])
    (tmp_path / "base" / "pipeline.yaml").write_text(
        f"inputter: {{type: image_folder, train: {base}, num_classes: 3, classes: null}}\n")
    (tmp_path / "p.yaml").write_text(FOLDERS.format(train=new, path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"warning: callbacks[0].path: {tmp_path / 'base'} was trained on other classes (0, 1, 2), as many as " \
           "this pipeline's, so its head (classifier) is restored" in result.stdout, result.stdout
    # Folders named alike on other data: the same-names-other-data warning, saying where the names come from.
    same = _class_folders(tmp_path / "other_0_2", ["0", "1", "2"])
    (tmp_path / "p.yaml").write_text(FOLDERS.format(train=same, path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert f"was trained on other data ({base}) with the classes this pipeline names (the sub-folder names of its " \
           "data, as inputter.classes is null): 0, 1, 2" in result.stdout, result.stdout
    (tmp_path / "p.yaml").write_text(FOLDERS.format(train=base, path=prefix, skip="[]"))  # a longer run of the same task
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0 and "warning" not in result.stdout, result.stdout


@pytest.mark.slow
def test_eval_refuses_a_checkpoint_trained_on_other_classes(tmp_path: Path) -> None:
    """Trial B8: `eval --checkpoint` of the digits 0-4 run scored it on digits 5-9 (0.17) without a
    word, and predict called a four "nine"."""
    prefix = _run_trained_on(tmp_path / "base", ["zero", "one", "two"])
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[head]").replace(
        "  max_epochs: 1\n", f"  max_epochs: 1\n  model_dir: {tmp_path / 'mine'}\n"))
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    for command in ("eval", "predict"):
        args = [command, str(tmp_path / "p.yaml"), "--checkpoint", prefix] + ([str(tmp_path / "x.png")] if command == "predict" else [])
        result = subprocess.run([sys.executable, "-m", "dsl", *args], capture_output=True, text=True, timeout=300)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"dslrun: error: --checkpoint {prefix}: it was trained by {tmp_path / 'base'} on other classes (zero, " \
               "one, two), not this pipeline's (five, six, seven)" in result.stderr, result.stderr

    # Trial B12: both sides' class names from their sub-folders (image_folder, classes null).
    old, new = _class_folders(tmp_path / "old", ["0", "1", "2"]), _class_folders(tmp_path / "digits", ["5", "6", "7"])
    (tmp_path / "base" / "pipeline.yaml").write_text(f"inputter: {{type: image_folder, train: {old}, num_classes: 3}}\n")
    (tmp_path / "p.yaml").write_text(FOLDERS.format(train=new, path=prefix, skip="[head]").replace(
        "  max_epochs: 1\n", f"  max_epochs: 1\n  model_dir: {tmp_path / 'mine'}\n"))
    result = subprocess.run([sys.executable, "-m", "dsl", "predict", str(tmp_path / "p.yaml"), "--checkpoint", prefix,
                             str(tmp_path / "x.png")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"it was trained by {tmp_path / 'base'} on other classes (0, 1, 2), not this pipeline's (5, 6, 7)" \
           in result.stderr, result.stderr


def test_a_checkpoint_of_another_network_type_is_a_warning_at_plain_validate(tmp_path: Path) -> None:
    """Trial B9: plain validate took an MLP run's checkpoint for a ResNet without a word."""
    prefix = _run_trained_on(tmp_path / "mlp04", ["five", "six", "seven"])
    (tmp_path / "mlp04" / "pipeline.yaml").write_text("inputter: {classes: [five, six, seven]}\nnetwork: {type: simple_cnn}\n")
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f":15:11: warning: callbacks[0].path: {tmp_path / 'mlp04'} trained a simple_cnn network, this pipeline " \
           "builds a mlp: their variables will not match by name" in result.stdout, result.stdout


def test_a_keyword_misspelt_in_a_pattern_list_is_a_warning(tmp_path: Path) -> None:
    """Trial B10: `trainable: [haed]` passed plain validate as a pattern of variable names."""
    code, lines = validate(tmp_path, str(tmp_path / "base"), skip="[haed]")
    assert code == 0 and f"{tmp_path / 'p.yaml'}:12:12: warning: callbacks[0].skip[0]: 'haed' is read as a pattern of " \
                         "variable names, not as the group head; did you mean 'head'? (`validate --build` matches each " \
                         "pattern against the network)" in lines, lines
    code, lines = validate(tmp_path, str(tmp_path / "base"), skip="[logit, head]")  # a pattern, far from both
    assert code == 0 and not [line for line in lines if "skip" in line], lines


def test_a_checkpoint_of_the_same_network_type_with_other_settings_is_a_warning(tmp_path: Path) -> None:
    """Trial B10: a ResNet-32 started from a ResNet-20 run: plain validate said 0 errors."""
    prefix = _run_trained_on(tmp_path / "deep", ["five", "six", "seven"])
    trained = "inputter: {classes: [five, six, seven]}\nnetwork: {type: mlp, hidden_units: [64], dropout: 0.5}\n"
    (tmp_path / "deep" / "pipeline.yaml").write_text(trained)
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f":15:11: warning: callbacks[0].path: {tmp_path / 'deep'} trained its mlp with other settings (hidden_units " \
           "[64] there, [128] here): its variables may not match" in result.stdout, result.stdout
    # Trial B13: a variant that extends the fine-tuning pipeline changes the network; the warning stays at the
    # callback's line (in p.yaml) and names the variant's line that set it.
    (tmp_path / "variant.yaml").write_text("extends: p.yaml\nnetwork: {hidden_units: [32]}\n")
    result = validate_without_tensorflow(tmp_path / "variant.yaml")
    assert f"(hidden_units [64] there, [32] here ({tmp_path / 'variant.yaml'}:2))" in result.stdout, result.stdout
    (tmp_path / "deep" / "pipeline.yaml").write_text(trained.replace("[64]", "[128]"))  # dropout alone: no variable
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert "other settings" not in result.stdout, result.stdout


def test_a_checkpoint_of_images_of_another_shape_is_a_warning(tmp_path: Path) -> None:
    """Trial B17: a grayscale fine-tune of a run on RGB images passed plain validate without a word; the
    first convolution's kernel differs in its channels (`--build` and the run refused it)."""
    prefix = _run_trained_on(tmp_path / "rgb", ["five", "six", "seven"])
    (tmp_path / "rgb" / "pipeline.yaml").write_text(
        "inputter: {classes: [five, six, seven], image_shape: [8, 8, 3]}\nnetwork: {type: mlp, hidden_units: [128]}\n")
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]").replace("[8, 8, 3]", "[8, 8, 1]"))
    result = validate_without_tensorflow(tmp_path / "p.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f":15:11: warning: callbacks[0].path: {tmp_path / 'rgb'} trained its mlp with other settings " \
           f"(inputter.image_shape [8, 8, 3] there, [8, 8, 1] here ({tmp_path / 'p.yaml'}:6)): its variables may not " \
           "match" in result.stdout, result.stdout
    (tmp_path / "p.yaml").write_text(NAMED.format(path=prefix, skip="[]"))  # the same shape: nothing to say
    assert "other settings" not in validate_without_tensorflow(tmp_path / "p.yaml").stdout


def test_run_refuses_a_missing_path_before_tensorflow_unless_it_resumes(tmp_path: Path) -> None:
    """Trial B10: a wrong init_checkpoint.path stopped the run 14 s in, after TensorFlow loaded."""
    text = PIPELINE.format(path=tmp_path / "nowhere", skip="[]") + f"  model_dir: {tmp_path / 'run'}\n"
    (tmp_path / "p.yaml").write_text(text)
    code = ("import sys; from dsl.cli import main\ntry:\n    main(['run', sys.argv[1]])\nexcept SystemExit as e:\n"
            "    print('loaded', 'tensorflow' in sys.modules); raise\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.yaml")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "loaded False" in result.stdout, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'p.yaml'}:11:11: error: callbacks[0].path: '{tmp_path / 'nowhere'}' does not exist; train the base "
        "pipeline whose runner.model_dir it is first, or fix the path (relative paths are relative to the directory "
        "dslrun starts in)"], result.stderr
    assert not (tmp_path / "run").exists()
    from dsl.callbacks._init_checkpoint_check import missing_at_start
    from dsl.language.pipeline import check_pipeline_with_sources

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)  # a run that resumes its own: the path is not read
    (tmp_path / "run" / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    resolved, _, sources = check_pipeline_with_sources(str(tmp_path / "p.yaml"))
    assert resolved is not None and sources is not None and missing_at_start(resolved, sources) == []


def test_a_misspelt_path_gets_the_nearest_that_exists(tmp_path: Path) -> None:
    """Trial B13 wrote runs/base4/best for runs/base04/best: clear, but no "did you mean"."""
    (tmp_path / "runs" / "base04" / "best").mkdir(parents=True)
    (tmp_path / "p.yaml").write_text(PIPELINE.format(path="runs/base4/best", skip="[head]") + "  model_dir: runs/mine\n")
    result = validate_without_tensorflow(tmp_path / "p.yaml")  # run in tmp_path: the path is relative to it
    assert "callbacks[0].path: 'runs/base4/best' does not exist (yet)" in result.stdout, result.stdout
    assert "or fix the path; did you mean runs/base04/best?" in result.stdout, result.stdout
    code = "import sys; from dsl.cli import main; main(['run', sys.argv[1]])"
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.yaml")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 1 and run.stderr.rstrip().endswith(
        "(relative paths are relative to the directory dslrun starts in); did you mean runs/base04/best?"), run.stderr
    # A near name that is no checkpoint (the pipeline file beside the run) is not offered: a folder, an
    # .index or an .h5 file is. Checked without the validate command around it, in the same folder.
    from dsl.callbacks._init_checkpoint_check import checkpoint_problem

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "base.yaml").write_text("version: 1\n")
    (tmp_path / "other" / "weights.h5").write_bytes(b"")
    assert checkpoint_problem(str(tmp_path / "other" / "base"))[0].endswith("or fix the path")
    assert checkpoint_problem(str(tmp_path / "other" / "weight.h5"))[0].endswith(
        f"did you mean {tmp_path / 'other' / 'weights.h5'}?")
    assert checkpoint_problem(str(tmp_path / "runs" / "base"))[0].endswith(f"did you mean {tmp_path / 'runs' / 'base04'}?")


def test_a_passing_plain_validate_of_a_fine_tune_points_at_build(tmp_path: Path) -> None:
    """Trial B10 took plain validate's "0 errors" for its trainable patterns too; they need the network."""
    (tmp_path / "p.yaml").write_text(PIPELINE.format(path=tmp_path / "base", skip="[head]"))
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 0
    assert f"(the network was not built: dslrun validate --build {tmp_path / 'p.yaml'} matches init_checkpoint's " \
           "checkpoint and patterns with it)" in result.stderr, result.stderr
    (tmp_path / "q.yaml").write_text(PIPELINE.format(path=tmp_path / "base", skip="[head]").replace(
        "callbacks:\n  - type: init_checkpoint\n    path: " + str(tmp_path / "base") + "\n    skip: [head]\n", ""))
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "q.yaml")], catch_exceptions=False)
    assert result.exit_code == 0 and "network was not built" not in result.stderr, result.output


def test_a_checkpoint_named_beside_its_folder_gets_the_path_that_holds_it(tmp_path: Path) -> None:
    """Trial B11 wrote `runs/ft59/ckpt-90` for `runs/ft59/checkpoints/ckpt-90`: the error says which."""
    from dsl.engine.checkpoint_paths import given_checkpoint
    from dsl.language.errors import DslError

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "ckpt-90.index").write_bytes(b"")
    with pytest.raises(DslError, match=rf"--checkpoint {tmp_path / 'run' / 'ckpt-90'}: no such checkpoint .*; did you "
                                       rf"mean {tmp_path / 'run' / 'checkpoints' / 'ckpt-90'}\?$"):
        given_checkpoint(str(tmp_path / "run" / "ckpt-90"), "--checkpoint")
    with pytest.raises(DslError, match=r"no such checkpoint \(expected a directory or a prefix with .*ckpt-91.index\)$"):
        given_checkpoint(str(tmp_path / "run" / "ckpt-91"), "--checkpoint")


def test_a_checkpoint_number_the_run_lacks_lists_the_ones_it_holds(tmp_path: Path) -> None:
    """Trial B15's ckpt-999 inside a real run was "does not exist (yet)", with nothing to pick from; a
    finished run (its DONE marker) writes no more checkpoints, so there it is an error."""
    checkpoints = tmp_path / "base" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for step in (12, 6, 18):
        (checkpoints / f"ckpt-{step}.index").write_bytes(b"")
    code, lines = validate(tmp_path, str(checkpoints / "ckpt-999"))
    assert code == 0 and lines == [
        f"{tmp_path / 'p.yaml'}:11:11: warning: callbacks[0].path: '{checkpoints / 'ckpt-999'}' does not exist (yet): "
        f"{checkpoints} holds ckpt-6, ckpt-12, ckpt-18; give one of them, or the run directory {tmp_path / 'base'} for "
        "its newest"], lines
    (tmp_path / "base" / "DONE").write_text('{"step": 18, "checkpoint": "ckpt-18"}\n')
    code, lines = validate(tmp_path, str(checkpoints / "ckpt-999"))
    assert code == 1 and len(lines) == 1 and f"error: callbacks[0].path: '{checkpoints / 'ckpt-999'}' does not exist: " \
        f"{checkpoints} holds ckpt-6, ckpt-12, ckpt-18;" in lines[0], lines


def test_a_fine_tune_that_sets_its_own_length_under_a_base_files_piecewise_drops_is_warned(tmp_path: Path) -> None:
    """Trial B16: a 25-epoch fine-tune extending an 8-epoch base inherited `boundaries: [6]` and ran its
    last 19 epochs at a tenth of its rate, with nothing said. The warning stands at the length the
    file sets; a base whose length is inherited too, or a schedule written here, is taken as meant."""
    schedule = ("  optimizer: {type: momentum, learning_rate: 0.1}\n"
                "  lr_schedule: {type: piecewise, boundaries: [6], values: [1.0, 0.1]}\n")
    base = PIPELINE.format(path=tmp_path / "base", skip="[]").replace(
        "  type: image_classification\n", "  type: image_classification\n" + schedule).replace("max_epochs: 1", "max_epochs: 8")
    (tmp_path / "base.yaml").write_text(base)
    tune = tmp_path / "tune.yaml"
    tune.write_text("extends: base.yaml\nmodeler:\n  optimizer: {learning_rate: 0.01}\nrunner:\n  max_epochs: 25\n")
    result = CliRunner().invoke(main, ["validate", str(tune)], catch_exceptions=False)
    warnings = [line for line in result.output.splitlines() if "lr_schedule" in line]
    assert result.exit_code == 0 and warnings == [
        f"{tune}:5:15: warning: runner.max_epochs: this fine-tuning run trains 25 epochs under the piecewise "
        f"modeler.lr_schedule of {tmp_path / 'base.yaml'}:10, written for that file's run: the rate drops to 0.1 x "
        f"after epoch 6, for the last 19 epochs; give {tune} its own modeler.lr_schedule (type: constant keeps the "
        "rate) if that is not meant"], result.output
    for meant in ("runner: {}\n",  # the base's length too
                  "runner:\n  max_epochs: 25\nmodeler:\n  lr_schedule: {type: piecewise, boundaries: [20], values: [1.0, 0.1]}\n",
                  "runner:\n  max_epochs: 5\n"):  # ends before the drop
        tune.write_text("extends: base.yaml\n" + meant)
        result = CliRunner().invoke(main, ["validate", str(tune)], catch_exceptions=False)
        assert result.exit_code == 0 and "this fine-tuning run" not in result.output, (meant, result.output)


def test_the_schedule_is_described_in_a_few_words_for_the_runs_first_line() -> None:
    from dsl.modelers.base import describe_schedule

    assert describe_schedule({"type": "piecewise", "boundaries": [6, 9], "values": [1.0, 0.1, 0.01]}) == \
        "schedule piecewise (x1, x0.1 from epoch 6, x0.01 from epoch 9)"
    assert describe_schedule({"type": "cosine", "alpha": 0.0}) == "schedule cosine (to x0 over the run)"
    assert describe_schedule({"type": "exponential", "decay_rate": 0.5, "decay_epochs": 3}) == \
        "schedule exponential (x0.5 every 3 epochs)"
    assert describe_schedule({"type": "constant"}) == describe_schedule({}) == ""
