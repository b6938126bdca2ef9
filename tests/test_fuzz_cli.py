"""Fuzzing `dslrun validate` and `dslrun show` from the command line.

Mutated copies of the shipped pipelines and random YAML must never produce a traceback or a
hang; the exit status is 0 or 1, and every error line says where (`file:line:col: error:`).
In-process through click's CliRunner (fast), plus a few real processes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsl.cli import main

PIPELINES = Path(__file__).resolve().parent.parent / "pipelines"
SHIPPED = sorted(p.name for p in PIPELINES.glob("*.yaml"))
SECONDS_PER_EXAMPLE = 20
LOCATED = re.compile(r"^.+:\d+:\d+: (error|warning): ")
SUMMARY = re.compile(r"^\d+ files?, \d+ invalid, \d+ errors?")
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

YAML_NOISE = list(":-[]{},&*!|>'\"#%@`?\t \n") + ["null", "~", "1e400", "-1", "0x10", "true", "<<: *a", "&a",
                                                    "!!python/name:os.system", "${HOME}", "extends: x.yaml"]


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail the example instead of hanging the suite."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the command took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """A copy of pipelines/, so mutated files still find the files they extend."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "pipelines"
        shutil.copytree(PIPELINES, target)
        yield target


def check_output(output: str) -> None:
    assert "Traceback" not in output, output
    for line in output.splitlines():
        if "error:" in line and not SUMMARY.match(line):
            assert LOCATED.match(line), f"error without a location: {line!r}"


def run_both(path: Path) -> None:
    for command in ("validate", "show"):
        with time_limit(SECONDS_PER_EXAMPLE):
            result = CliRunner().invoke(main, [command, str(path)])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{command} raised {result.exception!r} on:\n{path.read_text()[:2000]}")
        assert result.exit_code in (0, 1), (command, result.exit_code, result.output)
        check_output(result.output)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A shipped pipeline with a few lines deleted, duplicated, cut or sprinkled with YAML syntax."""
    lines = (PIPELINES / draw(st.sampled_from(SHIPPED))).read_text().splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "cut", "insert", "dedent", "indent"]))
        line = lines[index]
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, line)
        elif action == "cut":
            lines[index] = line[: draw(st.integers(0, len(line)))]
        elif action == "insert":
            at = draw(st.integers(0, len(line)))
            lines[index] = line[:at] + draw(st.sampled_from(YAML_NOISE)) + line[at:]
        elif action == "dedent":
            lines[index] = line.lstrip()
        else:
            lines[index] = "  " + line
    return "\n".join(lines) + "\n"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["version", "inputter", "network", "modeler", "runner", "callbacks", "type", "extends",
                         "seed", "batch_size", "workflow", "max_epochs"]) | st.text(max_size=6),
        children, max_size=5),
    max_leaves=12,
)


@FUZZ
@given(text=mutated())
def test_mutated_shipped_pipelines(workdir: Path, text: str) -> None:
    path = workdir / "fuzzed.yaml"
    path.write_text(text)
    run_both(path)


@FUZZ
@given(value=json_values)
def test_random_yaml_documents(workdir: Path, value: object) -> None:
    path = workdir / "random.yaml"
    path.write_text(yaml.safe_dump(value, allow_unicode=True))
    run_both(path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.text(max_size=300))
def test_random_bytes(workdir: Path, raw: bytes | str) -> None:
    path = workdir / "bytes.yaml"
    path.write_bytes(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    run_both(path)


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    "version: 1\ninputter: [\n",
    "version: 1\n\tinputter: {}\n",
    "\xef\xbb\xbfversion: 1\nrunner: {max_epochs: -1}\n",
    "a: &a [*a]\n",
    "extends: ../../../../../../etc/hostname\n",
])
def test_real_processes_exit_0_or_1_located(workdir: Path, text: str) -> None:
    path = workdir / "proc.yaml"
    path.write_text(text)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    for command in ("validate", "show"):
        result = subprocess.run([sys.executable, "-m", "dsl", command, str(path)], capture_output=True, text=True,
                                env=env, timeout=60)
        assert result.returncode in (0, 1)
        check_output(result.stdout + result.stderr)
