"""TensorFlow's C++ start-up lines, filtered as TF_CPP_MIN_LOG_LEVEL asks.

Since TensorFlow 2.19, the lines its shared libraries log while they load (before absl's
InitializeLog: "oneDNN custom operations are on", "Could not find cuda drivers", ...) go
straight to stderr whatever TF_CPP_MIN_LOG_LEVEL says, each block headed by "WARNING: All log
messages before absl::InitializeLog() is called are written to STDERR". `install()` (called
by dsl.engine, which itself imports no TensorFlow) makes the first `import tensorflow` of the
process, wherever it happens, run inside `filtered()` and list the devices there too: stderr's
file descriptor is held for that time and only what the level lets through is written back.
The failed `cuInit` of the CUDA platform on a host with no NVIDIA driver is dropped as well:
it only says there is no GPU.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

_ABSL_HEADER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def keep(line: str, min_level: int, nvidia_driver: bool) -> bool:
    """Whether a line written to stderr during TensorFlow's start-up reaches the user."""
    if line.rstrip("\n") == _ABSL_HEADER:
        return False
    match = _ABSL_LINE.match(line)
    if match is None:
        return True
    if not nvidia_driver and "failed call to cuInit" in line:
        return False
    return _SEVERITY[match.group(1)] >= min_level


def _min_level() -> int:
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


@contextlib.contextmanager
def filtered() -> Iterator[None]:
    """Inside: stderr (fd 2) is captured; on exit the lines `keep` lets through are written to it."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            level, nvidia = _min_level(), os.path.exists("/proc/driver/nvidia")
            lines = capture.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if keep(line, level, nvidia))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


class _FilteredLoader(importlib.abc.Loader):
    """TensorFlow's own loader, executing the package inside `filtered()`."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        with filtered():
            self._loader.exec_module(module)
            module.config.list_physical_devices("GPU")  # the CUDA platform's start-up lines too

    def __getattr__(self, name: str) -> Any:  # resource readers and the like: TensorFlow's loader's
        return getattr(self._loader, name)


class _TensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as the other finders do, once, and hands it `_FilteredLoader`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _FilteredLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Filter the start-up lines of this process's first `import tensorflow` (if it is yet to come)."""
    if "tensorflow" not in sys.modules and not any(isinstance(f, _TensorFlowFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TensorFlowFinder())
