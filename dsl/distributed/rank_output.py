"""Whole lines on stdout and stderr under an MPI launcher, so its per-line tags stay per line.

`mpirun --tag-output` (and `horovodrun` when it launches through MPI) prefixes what a rank
writes with `[1,0]<stdout>:`, but per piece it reads, not per line: Python's `print` writes
a message and its newline separately, and a line then ended in the next line's tag
(`... checkpoint ckpt-8[1,0]<stdout>:`). `whole_lines()` replaces sys.stdout and sys.stderr by
writers that hand the file descriptor complete lines (up to the last newline or carriage
return, for progress bars) in one write each.

Pure Python, no TensorFlow: the CLI installs it before any command runs.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, TextIO

# Set by OpenMPI's launcher in every rank (horovodrun through MPI, mpirun).
_MPI_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK")


class WholeLines(io.TextIOBase):
    """A text stream over a file descriptor that writes only whole lines, each in one write."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd = stream.fileno()
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    def write(self, text: str) -> int:
        self._pending += text
        cut = max(self._pending.rfind("\n"), self._pending.rfind("\r"))
        if cut >= 0:
            self._write_out(self._pending[: cut + 1])
            self._pending = self._pending[cut + 1 :]
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._write_out(self._pending)
            self._pending = ""

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def writable(self) -> bool:
        return True

    def _write_out(self, text: str) -> None:
        data = text.encode(self._encoding, errors="backslashreplace")
        while data:
            data = data[os.write(self._fd, data):]


def under_mpi_launcher(environ: Any = None) -> bool:
    """Whether this process is a rank that an MPI launcher started (its output is tagged)."""
    environ = os.environ if environ is None else environ
    return any(name in environ for name in _MPI_RANK_VARIABLES)


def whole_lines() -> None:
    """Under an MPI launcher, make sys.stdout and sys.stderr write whole lines (see the module doc).

    Elsewhere, stdout is made line-buffered: piped (`dslrun run p.yaml | tee log`), Python buffers
    it by blocks while stderr goes out at once, and a warning then stood pages before the
    progress lines it came between."""
    if not under_mpi_launcher():
        reconfigure = getattr(sys.stdout, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(line_buffering=True)
            except (OSError, ValueError, io.UnsupportedOperation):
                pass  # not a real text file (a test's capture): leave it
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, WholeLines) or not hasattr(stream, "fileno"):
            continue
        try:
            stream.flush()
            replacement = WholeLines(stream)
        except (OSError, ValueError, io.UnsupportedOperation):
            continue  # not a real file descriptor (a test's capture): leave it
        setattr(sys, name, replacement)
