"""The bytecode Python caches for autograph's temporary modules is removed at exit (dsl/engine/_autograph_files.py).

tests/test_train_e2e.py checks a whole run leaves nothing; this checks the premise (Python does
cache a `.pyc` for autograph's module, which TensorFlow alone leaves behind) and the removal.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from tensorflow.python.autograph.pyct import loader

from dsl.engine._autograph_files import remove_compiled


def test_the_cached_bytecode_of_autograph_modules_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    module, source = loader.load_source("def f():\n  return 1\n", delete_on_exit=False)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cached = Path(module.__spec__.cached)
    assert cached.parent == tmp_path / "__pycache__" and cached.exists()
    remove_compiled()
    assert not cached.exists()
    assert Path(source).exists()  # the module itself is TensorFlow's to remove (at exit)
