"""The README's quick start, command by command as a newcomer types it, on generated data.

The commands are read from the README itself (the shell block that trains
`pipelines/quickstart.yaml`), so a command the README changes is the command this test runs.
They run in a fresh directory holding a copy of `pipelines/` and the data `make demo` would
generate (smaller: 256 train images), with nothing added to them.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e_support import DSLRUN, ENV, dslrun

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[list[str]]:
    """Each `dslrun ...` line of the README's shell block that trains the quick start, as words."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    block = next(b for b in blocks if "dslrun pipelines/quickstart.yaml" in b)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip().startswith("dslrun")]


def test_the_readme_shows_the_whole_quick_start() -> None:
    verbs = [words[1] for words in quick_start_commands()]
    assert verbs == ["validate", "pipelines/quickstart.yaml", "eval", "predict", "export"], verbs


@pytest.mark.slow
def test_the_readme_quick_start_runs_end_to_end(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "pipelines", tmp_path / "pipelines")
    dslrun("data", "synthetic", "--out", str(tmp_path / "data" / "synthetic"), "--num-train", "256", "--num-val", "64")
    outputs = []
    for words in quick_start_commands():
        result = subprocess.run([*DSLRUN, *words[1:]], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                                timeout=900)
        assert result.returncode == 0, f"{shlex.join(words)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        outputs.append(result)
    validate, train, evaluate, predict, export = outputs
    assert "0 invalid" in validate.stdout + validate.stderr
    assert "final validation" in train.stdout + train.stderr
    assert "/best/" in json.loads(evaluate.stdout.strip().splitlines()[-1])["checkpoint"]  # --checkpoint best
    assert "probabilities" in json.loads(predict.stdout.strip().splitlines()[-1])
    assert (tmp_path / "exported" / "quickstart" / "saved_model.pb").is_file() and "serving_default" in export.stdout
