"""What a checkpoint's tensors do not hold: the val phases done at its step and the callbacks' state.

Beside each training checkpoint `checkpoints/ckpt-N` lies `ckpt-N.state.json`:

    {"step": N, "epoch": E, "val_phases_done": 1,
     "callbacks": {"early_stopping": {"wait": 2, ...}, "val_basic": {...}}}

Why a file beside the checkpoint and not variables inside it:
- it changes after the checkpoint at the same step: the val phase that follows a train
  epoch (and the callbacks' reaction to it) comes after that epoch's checkpoint, and a
  TensorFlow checkpoint cannot be rewritten in place atomically (its index and data files
  are renamed one after the other). This file is replaced whole (temporary file, fsync,
  rename), so a reader sees the old or the new state, never half of one;
- it is written *before* a new checkpoint is committed (CheckpointManager writes the
  `checkpoint` list last), so every listed checkpoint has its state; a stray file of a
  checkpoint that never got listed is overwritten by the next save of that step;
- checkpoints written before it existed still load unchanged (no variable is missing from
  them): they simply have no state, and the callbacks start as they always did;
- callback state is JSON (a best value may be null, a monitor name a string), which tf
  variables would have to encode.

The runner checks that the file's step is the checkpoint's step before using it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dsl.engine.rundir import atomic_write_text

SUFFIX = ".state.json"


def state_path(prefix: str | Path) -> Path:
    """`ckpt-N.state.json` for the checkpoint prefix `ckpt-N`."""
    return Path(f"{prefix}{SUFFIX}")


def write_state(prefix: str | Path, state: dict[str, Any]) -> None:
    """Replace the state of checkpoint `prefix` whole."""
    atomic_write_text(state_path(prefix), json.dumps(state, indent=1) + "\n")


def read_state(prefix: str | Path, step: int) -> dict[str, Any] | None:
    """The state of checkpoint `prefix` when it describes `step`; None when absent, unreadable or stale."""
    try:
        state = json.loads(state_path(prefix).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("step") != step:
        return None
    return state


def sweep_states(directory: Path, kept: Iterable[str]) -> None:
    """Remove the state files of checkpoints CheckpointManager deleted (max_to_keep): it only knows its own files."""
    names = {Path(prefix).name for prefix in kept}
    for path in Path(directory).glob(f"ckpt-*{SUFFIX}"):
        if path.name[: -len(SUFFIX)] not in names:
            path.unlink(missing_ok=True)
