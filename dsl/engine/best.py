"""The best checkpoint so far: model_dir/best/, swapped in whole so it is never half written.

`best/` holds a `tf.train.Checkpoint(model=...)` (the weights `eval`, `export` and
`init_checkpoint` need; resuming uses checkpoints/) and `best.json` with the monitored
value, step and epoch. Only writing one imports TensorFlow, so `--checkpoint best` and a
resume's bookkeeping read it without.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsl.language.errors import DslError

if TYPE_CHECKING:
    import tensorflow as tf

BEST_DIR = "best"
RECORD = "best.json"


def read_best(model_dir: Path) -> dict[str, Any] | None:
    """The record of the best checkpoint, or None; finishes a swap a crash interrupted."""
    final, old = model_dir / BEST_DIR, model_dir / f"{BEST_DIR}.old"
    if not final.exists() and old.exists():
        os.replace(old, final)
    try:
        record: dict[str, Any] = json.loads((final / RECORD).read_text())
        return record
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_best(model_dir: Path, model: tf.keras.Model, record: dict[str, Any]) -> Path:
    """Write the model and `record` to a temporary directory, then swap it in as best/."""
    import tensorflow as tf

    final = model_dir / BEST_DIR
    tmp, old = model_dir / f"{BEST_DIR}.tmp", model_dir / f"{BEST_DIR}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp), max_to_keep=1)
    prefix = Path(manager.save(checkpoint_number=int(record["step"])))
    _write_synced(tmp / RECORD, json.dumps({**record, "checkpoint": prefix.name}, indent=1) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final / prefix.name


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def record_of(prefix: str) -> dict[str, Any] | None:
    """The best.json beside checkpoint `prefix` when it describes that checkpoint (its step, epoch and value)."""
    try:
        record = json.loads((Path(prefix).parent / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("checkpoint") == Path(prefix).name else None


def best_model_dir(model_dir: Path) -> str:
    """model_dir/best, or an error saying how a run gets one."""
    read_best(model_dir)  # finishes a swap of best/ that a crash interrupted
    best = model_dir / BEST_DIR
    if not (best / "checkpoint").is_file():
        if not model_dir.is_absolute() and not model_dir.exists():  # trial A16 ran predict from a sub-folder
            raise DslError(
                f"--checkpoint best: {model_dir} does not exist relative to this directory ({Path.cwd()}), where "
                "runner.model_dir is read from: run the command from the folder the run was started in, or give "
                "--set runner.model_dir=<the run's directory>")
        raise DslError(
            f"--checkpoint best: {model_dir} has no best model ({best} does not exist); the checkpoint "
            "callback keeps one with save_best, e.g. {type: checkpoint, save_best: {monitor: val/accuracy}}"
        )
    return str(best)


def best_record(prefix: str) -> dict[str, Any] | None:
    """The best.json beside checkpoint `prefix` when it describes that checkpoint (step, epoch, value)."""
    return record_of(prefix)
