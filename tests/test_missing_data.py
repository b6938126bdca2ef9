"""A data file or folder the pipeline names that is not there is said from the pipeline alone.

Plain `validate` warns at its line (data is often made after the pipeline is written); `dslrun
run` refuses to start, located the same way, before TensorFlow loads — a trial's typo in a path
was found 20 s into a start, and plain validate said "0 errors". `validate --data` reads the
files themselves (tests/test_validate_data.py).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from click.testing import CliRunner

from dsl.cli import main
from dsl.inputters.common import missing_sources

PIPELINE = """\
version: 1
inputter:
  type: image_classification_csv
  train: {train}
  val: {val}
  test: {test}
  classes: [cat, dog]
  image_shape: [8, 8, 3]
network: {{type: mlp}}
modeler: {{type: image_classification}}
runner: {{max_epochs: 1, workflow: [[train, 1], [val, 1]], model_dir: {run}}}
"""


def write(tmp_path: Path, **paths: str) -> Path:
    values = {"train": tmp_path / "train.csv", "val": tmp_path / "eval.csv", "test": "null", "run": tmp_path / "run"}
    values.update(paths)
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(**values), encoding="utf-8")
    return path


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_plain_validate_warns_at_the_line_of_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "train.csv").touch()
    path = write(tmp_path, val=str(tmp_path / "eval_typo.csv"))
    code, out, err = cli("validate", str(path))
    assert code == 0
    # An absolute path: no "relative to" (trial A12); a near name that exists is suggested.
    (tmp_path / "eval.csv").touch()
    assert out.splitlines() == [f"{path}:5:8: warning: inputter.val: {tmp_path / 'eval_typo.csv'} does not exist yet; "
                                "the run stops with an error unless it is made first"]
    code, out, err = cli("validate", str(path))
    assert out.splitlines() == [f"{path}:5:8: warning: inputter.val: {tmp_path / 'eval_typo.csv'} does not exist yet; "
                                f"did you mean {tmp_path / 'eval.csv'}?; the run stops with an error unless it is made first"]
    assert "1 warning" in err
    (tmp_path / "eval_typo.csv").touch()
    code, out, _ = cli("validate", str(path))
    assert code == 0 and "warning" not in out


def test_validate_data_says_it_once_as_an_error(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("a.png,cat\n", encoding="utf-8")
    path = write(tmp_path, val=str(tmp_path / "eval_typo.csv"))
    code, out, _ = cli("validate", "--data", str(path))
    assert code == 1
    said = [line for line in out.splitlines() if "eval_typo.csv does not exist" in line]
    assert len(said) == 1 and f"{path}:5:8: error: inputter.val:" in said[0], out


def test_run_refuses_to_start_located_and_makes_no_run_directory(tmp_path: Path) -> None:
    path = write(tmp_path, train="trian.csv")  # relative: to the directory dslrun starts in
    (tmp_path / "eval.csv").touch()
    code, _, err = cli("run", str(path))
    assert code == 1
    assert err.splitlines() == [f"{path}:4:10: error: inputter.train: trian.csv does not exist (relative paths are "
                                f"relative to {Path.cwd()}); fix the path or create the data (`dslrun data --help` "
                                "lists the example data sets it makes)"]
    # Relative, one letter off a file that exists where dslrun starts: said.
    (tmp_path / "train.csv").touch()
    with contextlib.chdir(tmp_path):
        code, _, err = cli("run", str(path))
    assert code == 1 and "trian.csv does not exist (relative paths are relative to " in err, err
    assert f"relative to {tmp_path}); did you mean train.csv?; fix the path" in err, err
    assert not (tmp_path / "run").exists()


def test_run_does_not_ask_for_the_data_of_a_mode_its_workflow_lacks(tmp_path: Path) -> None:
    """The test split is for `dslrun eval --mode test`: a run that does not read it is not refused
    for it (it gets past the check and fails on the empty train file instead)."""
    (tmp_path / "train.csv").touch()
    (tmp_path / "eval.csv").touch()
    path = write(tmp_path, test=str(tmp_path / "later.csv"))
    code, _, err = cli("run", str(path))
    assert code == 1 and "later.csv" not in err, err


def test_each_shape_of_a_source_is_looked_at(tmp_path: Path) -> None:
    (tmp_path / "a.tfrecord").touch()
    (tmp_path / "en.txt").touch()
    params = {
        "train": [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")],
        "val": str(tmp_path / "*.none"),
        "test": {"source": str(tmp_path / "en.txt"), "target": str(tmp_path / "de.txt")},
    }
    assert missing_sources(params) == [(("train", 1), str(tmp_path / "b.tfrecord")), (("val",), str(tmp_path / "*.none")),
                                       (("test", "target"), str(tmp_path / "de.txt"))]
    params["val"] = str(tmp_path / "*.tfrecord")  # a pattern that matches a file
    assert missing_sources(params, ("val",)) == []
