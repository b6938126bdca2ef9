"""The checkpoint a user names (`--checkpoint`, `--resume-from`), checked before TensorFlow loads.

A checkpoint is a prefix (`runs/x/checkpoints/ckpt-40`) whose files are `<prefix>.index` and
`<prefix>.data-00000-of-00001`; users name either file as often as the prefix, and a mistyped
path should fail at once, not after the ten seconds TensorFlow's import takes.
"""

from __future__ import annotations

import re
from pathlib import Path

from dsl.language.errors import DslError

_FILE = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def named_prefix(path: str) -> str:
    """The prefix whose `.index` or data file `path` names (when that prefix's .index exists), else `path`."""
    prefix = _FILE.sub("", path)
    return prefix if prefix != path and Path(f"{prefix}.index").is_file() else path


def given_checkpoint(path: str, option: str) -> str:
    """`path` as a directory or a prefix (a prefix's `.index` or data file is taken for the prefix);
    a DslError naming `option` when it is neither. Which checkpoint a directory holds is TensorFlow's
    to say (dsl.engine.checkpointing.resolve_checkpoint)."""
    if Path(path).is_dir():
        return path
    prefix = _FILE.sub("", path)
    if Path(f"{prefix}.index").exists():
        return prefix
    raise DslError(f"{option} {path}: no such checkpoint (expected a directory or a prefix with {prefix}.index)")
