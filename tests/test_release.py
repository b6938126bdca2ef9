"""A release: the version is one number everywhere, and the wheel and the sdist install into a
fresh virtual environment (their dependencies from the package registry) where `dslrun
validate pipelines/` runs, as a user's `pip install dslrun` would."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dsl

ROOT = Path(__file__).resolve().parents[1]


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def test_the_version_is_one_number_and_the_changelog_names_it() -> None:
    version = project_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "semantic versioning: MAJOR.MINOR.PATCH"
    assert dsl.__version__ == version
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), flags=re.M)
    assert released and released[0] == version, "the newest released entry of CHANGELOG.md is the version"
    assert subprocess.run([sys.executable, "-m", "dsl", "--version"], capture_output=True, text=True,
                          check=True).stdout.strip() == f"dslrun, version {version}"


@pytest.mark.slow
def test_the_wheel_and_the_sdist_install_and_validate_the_shipped_pipelines(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--no-isolation", "--outdir", str(dist),
                    str(ROOT)], check=True, capture_output=True, text=True)
    version = project_version()
    artefacts = [dist / f"dslrun-{version}-py3-none-any.whl", dist / f"dslrun-{version}.tar.gz"]
    assert sorted(dist.iterdir()) == sorted(artefacts)
    shipped = len(list((ROOT / "pipelines").glob("*.yaml")))
    for artefact in artefacts:
        venv = tmp_path / f"venv-{artefact.suffix.strip('.')}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(artefact)],
                                 capture_output=True, text=True)
        assert install.returncode == 0, install.stderr[-3000:]
        # From outside the checkout, so that nothing is imported from the working tree.
        result = subprocess.run([str(venv / "bin" / "dslrun"), "validate", str(ROOT / "pipelines")],
                                capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{shipped} files, 0 invalid, 0 errors" in result.stderr, result.stdout + result.stderr
        assert subprocess.run([str(venv / "bin" / "dslrun"), "--version"], capture_output=True, text=True,
                              cwd=tmp_path).stdout.strip() == f"dslrun, version {version}"
