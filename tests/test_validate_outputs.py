"""`dslrun validate` knows what each phase outputs, who reads it, and how long the schedule is.

Mistakes that used to surface only after training started (a monitor naming an output no
phase produces, a warmup as long as the run) are located validate errors or warnings now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.cli import main
from dsl.language.outputs import produced
from dsl.language.pipeline import load_pipeline
from dsl.language.resolved import Pipeline

BASE = """\
version: 1
name: outputs
inputter:
  type: synthetic
  num_examples: {train: 40, val: 16}
  image_shape: [8, 8, 3]
  num_classes: 4
  batch_size: 8
network: {type: mlp, hidden_units: [8]}
modeler:
  type: image_classification
  optimizer: {type: sgd, learning_rate: 0.1}
callbacks:
  - type: checkpoint
runner:
  max_epochs: 2
  workflow: [[train, 1], [val, 1]]
"""


def validate(tmp_path: Path, text: str, *args: str) -> tuple[int, list[str]]:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(path), *args], catch_exceptions=False)
    assert "Traceback" not in result.output
    return result.exit_code, [line.removeprefix(f"{path}:") for line in result.stdout.splitlines()]


def edit(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_a_misspelt_monitor_is_a_located_error_with_the_available_outputs(tmp_path: Path) -> None:
    text = edit("  - type: checkpoint\n", "  - type: checkpoint\n    save_best: {monitor: val/acc}\n")
    code, lines = validate(tmp_path, text)
    assert code == 1
    assert lines == [
        "15:26: error: callbacks[0].save_best.monitor: the val phase has no output 'acc'; did you mean "
        "'val/accuracy'? available: val/accuracy, val/loss, val/macro_f1"
    ]


@pytest.mark.parametrize(
    "callback, expected",
    [
        ("{type: early_stopping, monitor: train/los}",
         "callbacks[1].monitor: the train phase has no output 'los'; did you mean 'train/loss'? available: "
         "train/accuracy, train/learning_rate, train/loss"),
        ("{type: early_stopping, monitor: val/top_3_accuracy}",
         "callbacks[1].monitor: the val phase has no output 'top_3_accuracy'; did you mean 'val/accuracy'? "
         "available: val/accuracy, val/loss, val/macro_f1"),
        ("{type: early_stopping, monitor: val/skipped_examples}",
         "the val phase has no output 'skipped_examples'; available: val/accuracy, val/loss, val/macro_f1"),
    ],
)
def test_every_monitor_is_checked_against_the_modeler_and_inputter_outputs(
    tmp_path: Path, callback: str, expected: str
) -> None:
    code, lines = validate(tmp_path, edit("  - type: checkpoint\n", f"  - type: checkpoint\n  - {callback}\n"))
    assert code == 1
    assert len(lines) == 1 and expected in lines[0], lines


def test_outputs_follow_the_parameters_that_add_them(tmp_path: Path) -> None:
    text = edit("  - type: checkpoint\n", "  - type: checkpoint\n  - {type: early_stopping, monitor: val/top_3_accuracy}\n")
    assert validate(tmp_path, edit("  type: image_classification\n", "  type: image_classification\n  top_k: [3]\n",
                                   text)) == (0, [])
    (tmp_path / "t.csv").touch()  # there, or plain validate warns that they are not
    (tmp_path / "v.csv").touch()
    csv = text.replace("  type: synthetic\n  num_examples: {train: 40, val: 16}\n",
                       f"  type: image_classification_csv\n  train: {tmp_path / 't.csv'}\n  val: {tmp_path / 'v.csv'}\n"
                       "  skip_corrupt: true\n")
    assert validate(tmp_path, csv.replace("val/top_3_accuracy", "val/skipped_examples")) == (0, [])


def test_a_monitor_of_a_phase_the_workflow_lacks_is_an_error(tmp_path: Path) -> None:
    text = edit("  - type: checkpoint\n", "  - type: checkpoint\n    save_best: {monitor: val/accuracy}\n")
    code, lines = validate(tmp_path, edit("[[train, 1], [val, 1]]", "[[train, 1]]", text))
    assert code == 1
    assert lines == [
        "15:26: error: callbacks[0].save_best.monitor: val/accuracy is never produced: runner.workflow "
        f"({tmp_path / 'p.yaml'}:18) has no val phase; add [val, 1] to runner.workflow or watch an output "
        "of another phase"
    ]


def test_a_reporter_of_a_missing_phase_is_a_warning(tmp_path: Path) -> None:
    text = edit("  - type: checkpoint\n", "  - type: checkpoint\n  - type: val_accuracy\n")
    code, lines = validate(tmp_path, edit("[[train, 1], [val, 1]]", "[[train, 1]]", text))
    assert code == 0
    assert len(lines) == 1 and lines[0].startswith("15:11: warning: callbacks[1].type: val_accuracy reads "
                                                   "val/accuracy, but runner.workflow")


def test_top_k_of_all_classes_is_an_error(tmp_path: Path) -> None:
    code, lines = validate(tmp_path, edit("  type: image_classification\n", "  type: image_classification\n  top_k: [2, 4]\n"))
    assert code == 1
    assert lines == ["12:14: error: modeler.top_k[1]: top_4_accuracy is always 1 with 4 classes; use values below 4, "
                     "or remove it"]


SCHEDULE = "  optimizer: {type: sgd, learning_rate: 0.1}\n"


@pytest.mark.parametrize(
    "schedule, epochs, expected",
    [
        ("{type: cosine, warmup_epochs: 1}", 1,
         "error: modeler.lr_schedule.warmup_epochs: the warmup (1 epoch) is as long as the whole run "
         "(runner.max_epochs: 1 at {file}:17), so the cosine has no steps left"),
        ("{type: constant, warmup_epochs: 2}", 2,
         "warning: modeler.lr_schedule.warmup_epochs: the warmup (2 epochs) is as long as the whole run "
         "(runner.max_epochs: 2 at {file}:17): the learning rate never reaches optimizer.learning_rate"),
        ("{type: piecewise, boundaries: [1, 3], values: [1, 0.1, 0.01]}", 3,
         "warning: modeler.lr_schedule.boundaries[1]: boundary 3 epochs is not before the end of the run "
         "(runner.max_epochs: 3 at {file}:17), so values[2] (0.01) is never used"),
        ("{type: cosine, decay_epochs: 5, warmup_epochs: 1}", 3,
         "warning: modeler.lr_schedule.decay_epochs: the cosine decays over 5 epochs after the warmup, but the "
         "run ends first"),
        ("{type: exponential, decay_epochs: 3, staircase: true}", 3,
         "warning: modeler.lr_schedule.decay_epochs: with staircase: true the first decay comes 3 epochs from "
         "the start, after the run ends"),
    ],
)
def test_schedule_lengths_against_the_run(tmp_path: Path, schedule: str, epochs: int, expected: str) -> None:
    text = edit(SCHEDULE, f"{SCHEDULE}  lr_schedule: {schedule}\n").replace("max_epochs: 2", f"max_epochs: {epochs}")
    code, lines = validate(tmp_path, text)
    assert code == (1 if "error:" in expected else 0)
    assert len(lines) == 1 and expected.format(file=tmp_path / "p.yaml") in lines[0], lines


def test_schedules_that_fit_or_cannot_be_known_without_data_pass(tmp_path: Path) -> None:
    fits = edit(SCHEDULE, f"{SCHEDULE}  lr_schedule: {{type: cosine, warmup_epochs: 1}}\n")
    assert validate(tmp_path, fits) == (0, [])
    by_iters = fits.replace("max_epochs: 2", "max_iters: 3")
    assert validate(tmp_path, by_iters) == (0, [])  # steps per epoch: validate --data


@pytest.mark.slow
def test_declared_outputs_are_what_a_run_produces(tmp_path: Path) -> None:
    """The registry's declaration and the loop agree: a tiny run's phase outputs, name for name."""
    from dsl.commands._training import build_runner

    text = edit("  type: image_classification\n", "  type: image_classification\n  top_k: [2]\n")
    text = text.replace("max_epochs: 2", f"max_epochs: 1\n  model_dir: {tmp_path / 'run'}")
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    spec = load_pipeline(path)
    runner = build_runner(Pipeline.from_resolved(spec), resume=False)
    assert runner.run() == 0
    seen = {record["mode"]: sorted(set(record) - {"mode", "epoch", "step"}) for record in runner.history}
    assert seen == {phase: sorted(names) for phase, names in produced(spec).items()}
