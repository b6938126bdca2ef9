"""Piped output keeps its order: `dslrun run p.yaml 2>&1 | tee log` must read as it happened.

Python buffers a piped stdout by blocks while stderr goes out at once, so a warning stood pages
before the progress lines printed ahead of it (trial B9). The CLI makes stdout line-buffered
(`whole_lines()`, which every command runs first); this runs that in a process whose stdout and
stderr share one pipe, as a shell's `2>&1 |` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALL = "from dsl.distributed.rank_output import whole_lines\nwhole_lines()\n"
LINES = 'import sys\nprint("step 1")\nsys.stderr.write("warning: between\\n")\nprint("step 2")\n'


def _piped(script: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=60, check=True)
    return done.stdout.splitlines()


def test_stdout_and_stderr_lines_keep_their_order_in_one_pipe() -> None:
    assert _piped(CALL + LINES) == ["step 1", "warning: between", "step 2"]


def test_without_it_the_pipe_reorders_them() -> None:
    """The check above can fail: without the call, the same lines come out of order."""
    assert _piped(LINES) == ["warning: between", "step 1", "step 2"]
