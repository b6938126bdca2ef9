"""The plug-in packages of docs/extending.md, installed as a user installs them (pip, from their
folders under examples/plugins/, entry points written by setuptools) and used through the CLI:
a network and a backend that dslrun has never heard of train a pipeline."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_support import DSLRUN, ENV

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "plugins"
PACKAGES = ("dslrun-example-network", "dslrun-example-backend")

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
    """Both example packages pip-installed into a folder of their own (the venv stays as it was)."""
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
    env = {**ENV, "PYTHONPATH": str(site)} if site is not None else ENV
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
