"""The plug-in packages of docs/extending.md, installed as a user installs them (pip, from their
folders under examples/plugins/, entry points written by setuptools) and used through the CLI:
a network and a backend that dslrun has never heard of train a pipeline, and a task of its own
(regression on CSV rows) generates its data, validates, trains and evaluates."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_support import DSLRUN, ENV, RUN_BY_PACKAGE_TEST

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "plugins"
PACKAGES = ("dslrun-example-network", "dslrun-example-backend", "dslrun-example-task")
TASK_PIPELINE = EXAMPLES / "dslrun-example-task" / "regression.yaml"

PIPELINE = """\
version: 1
inputter: {{type: synthetic, num_examples: {{train: 32, val: 16}}, image_shape: [8, 8, 3], batch_size: 8}}
network: {{type: example_linear, dropout: 0.1}}
modeler: {{type: image_classification}}
runner:
  model_dir: {run}
  max_epochs: 1
  workflow: [[train, 1], [val, 1]]
  backend: example
  example: {{greeting: hi from a plug-in package}}
"""


@pytest.fixture(scope="module")
def site_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example packages pip-installed into a folder of their own (the venv stays as it was)."""
    target = tmp_path_factory.mktemp("site-packages")
    sources = tmp_path_factory.mktemp("sources")
    for package in PACKAGES:
        source = shutil.copytree(EXAMPLES / package, sources / package)  # pip's build files stay out of the checkout
        result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                                 "--target", str(target), str(source)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    names = {dist.metadata["Name"]: dist for dist in importlib.metadata.distributions(path=[str(target)])}
    assert set(PACKAGES) <= set(names)
    assert {ep.group for name in PACKAGES for ep in names[name].entry_points} == {"dslrun.plugins"}
    return target


def dslrun(args: list[str], cwd: Path, site: Path | None) -> subprocess.CompletedProcess[str]:
    # The packages' folder first, then what the tests run with (the checkout under test, when it is not the installed one).
    env = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), ENV.get("PYTHONPATH")]))} if site is not None else ENV
    return subprocess.run([*DSLRUN, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_installed_plugin_packages_train_a_pipeline_that_names_their_types(tmp_path: Path, site_packages: Path) -> None:
    pipeline = tmp_path / "plugged.yaml"
    pipeline.write_text(PIPELINE.format(run=tmp_path / "run"), encoding="utf-8")
    # Without the packages the types are unknown, each at its line.
    bare = dslrun(["validate", str(pipeline)], tmp_path, None)
    assert bare.returncode == 1
    assert f"{pipeline}:3:" in bare.stdout and "example_linear" in bare.stdout and f"{pipeline}:9:" in bare.stdout
    # validate, list and schema know a plug-in only when asked (--plugin): checking a file runs no third-party code.
    named = dslrun(["validate", "--plugin", "dslrun_example_network", "--plugin", "dslrun_example_backend", str(pipeline)],
                   tmp_path, site_packages)
    assert named.returncode == 0, named.stdout + named.stderr
    listed = dslrun(["list", "networks", "--plugin", "dslrun_example_network"], tmp_path, site_packages)
    assert "example_linear - A linear classifier on the flattened image" in listed.stdout
    # run loads installed plug-ins by their entry points.
    result = dslrun(["run", str(pipeline)], tmp_path, site_packages)
    assert result.returncode == 0, result.stderr
    assert "example backend: hi from a plug-in package" in result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["mode"] for r in records] == ["train", "val"] and "accuracy" in records[-1]


def documented_commands() -> list[list[str]]:
    """The `dslrun` lines of docs/extending.md's task block (the one marked as run here), as words."""
    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    block = re.search(re.escape(RUN_BY_PACKAGE_TEST) + r"\n```sh\n(.*?)```", text, flags=re.S)
    assert block is not None, "docs/extending.md: the task's commands block is missing its marker"
    lines = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    assert lines[0][:2] == ["pip", "install"]  # the fixture's pip install, into a folder of its own
    return [words[1:] for words in lines[1:] if words and words[0] == "dslrun"]


@pytest.mark.slow
def test_the_documented_task_package_generates_validates_trains_and_evaluates(tmp_path: Path, site_packages: Path) -> None:
    """docs/extending.md's task: its commands as written there, from a folder that holds the examples."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the commands name examples/plugins/...
    commands = documented_commands()
    assert [words[0] for words in commands] == ["data", "validate", str(TASK_PIPELINE.relative_to(ROOT)), "eval"]
    data, validate, train, evaluate = commands
    pipeline = str(TASK_PIPELINE.relative_to(ROOT))
    # Without the package its types are unknown, each at its line.
    bare = dslrun(["validate", pipeline], tmp_path, None)
    assert bare.returncode == 1 and f"{pipeline}:4:" in bare.stdout and "csv_regression" in bare.stdout
    # `dslrun data` lists an installed task's data set and writes it.
    assert "synthetic-regression" in dslrun(["data", "--help"], tmp_path, site_packages).stdout
    made = dslrun(data, tmp_path, site_packages)
    assert made.returncode == 0, made.stderr
    assert "feature_columns: [x1, x2, x3, x4, x5, x6, x7, x8]" in made.stdout
    rows = tmp_path / "data" / "rows"
    assert not (rows / "classes.txt").exists()
    targets = [float(row["target"]) for row in csv.DictReader((rows / "eval.csv").open(encoding="utf-8"))]
    spread = statistics.pstdev(targets)
    assert spread > 1.5  # a target worth learning: predicting its mean leaves an RMSE of `spread`

    valid = dslrun(validate, tmp_path, site_packages)
    assert valid.returncode == 0 and "inputter.train: 1000 examples" in valid.stdout, valid.stdout + valid.stderr
    # Every bad row is located at its file and line.
    bad = tmp_path / "bad.csv"
    lines = (rows / "train.csv").read_text(encoding="utf-8").splitlines()
    lines[4] = "abc," + lines[4].split(",", 1)[1]
    lines[8] = lines[8].rsplit(",", 1)[0]
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked = dslrun([*validate[:-1], "--set", f"inputter.train={bad}", pipeline], tmp_path, site_packages)
    assert checked.returncode == 1
    assert f"{bad}:5:1: error: inputter.train: column 'x1': 'abc' is not a finite number" in checked.stdout
    assert f"{bad}:9:1: error: inputter.train: expected 9 fields as in the header, found 8" in checked.stdout
    # An image network on its rows is refused at the line, naming the network that fits.
    mismatched = dslrun(["validate", "--plugin", "dslrun_example_task", "--set", "network={type: mlp}", pipeline],
                        tmp_path, site_packages)
    assert mismatched.returncode == 1 and "mlp_regressor" in mismatched.stdout

    # run and eval import the installed package by its entry point; the network learns the function.
    trained = dslrun(train, tmp_path, site_packages)
    assert trained.returncode == 0, trained.stderr
    records = [json.loads(line) for line in (tmp_path / "runs" / "rows" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["mode"] == "val"][-1]
    assert last["epoch"] == 20 and last["mae"] <= last["rmse"]
    assert last["rmse"] < 0.3 * spread, (last, spread)
    evaluated = dslrun(evaluate, tmp_path, site_packages)
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["rmse"] == pytest.approx(last["rmse"], rel=1e-5)
