"""The run directory: what a run leaves behind, written so that a crash never half-writes it.

Layout of `runner.model_dir`:
    pipeline.yaml          the resolved pipeline this run used (previous one kept on change)
    checkpoints/           tf.train.CheckpointManager (model, optimizer, step, epoch, data position)
    tensorboard/<mode>/    TensorBoard event files
    metrics.jsonl|csv      one record per finished phase (and what callbacks log)
    confusion_matrix_<mode>.png   a classifier's latest matrix of val (or eval --mode test) data
    init_checkpoint.json   the checkpoint an init_checkpoint callback started the run from (its
                           resolved file and digest: `path:` may name a run that trains on)
    .metrics.lock          taken while a record is written: the trainer and an `eval --watch`
                           process write the same metrics file
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` via a temporary file and rename: readers see old or new, never half."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_pipeline(model_dir: Path, text: str) -> str | None:
    """Store the resolved pipeline; returns a warning when it differs from the stored one."""
    path = model_dir / "pipeline.yaml"
    warning = None
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if old != text:
            atomic_write_text(model_dir / "pipeline.previous.yaml", old)
            warning = (
                f"the pipeline differs from the one stored in {path} when this run directory was "
                f"created ({changes(old, text)}); the old one is kept as pipeline.previous.yaml"
            )
    atomic_write_text(path, text)
    return warning


# The end marker: the chief writes it when training ends normally (watch.py stops on it,
# resume.py reads it for checkpoints older than state files).
DONE_MARKER = "DONE"


def clear_done(model_dir: Path) -> None:
    """A run starts: the previous run's end marker no longer applies."""
    (Path(model_dir) / DONE_MARKER).unlink(missing_ok=True)


def mark_done(model_dir: Path, step: int, checkpoint: str | None) -> None:
    """Training ended normally at `step`, its last checkpoint is `checkpoint`."""
    text = json.dumps({"step": int(step), "checkpoint": Path(checkpoint).name if checkpoint else None})
    atomic_write_text(Path(model_dir) / DONE_MARKER, text + "\n")


def read_done(model_dir: Path) -> dict[str, Any] | None:
    """The end marker's content, or None while the run is not over."""
    try:
        done: dict[str, Any] = json.loads((Path(model_dir) / DONE_MARKER).read_text(encoding="utf-8"))
        return done
    except (FileNotFoundError, ValueError):
        return None


def differs_from_stored(model_dir: Path, text: str) -> str | None:
    """The error when `text` is not the pipeline stored in `model_dir` (nothing is written):
    a finished run re-run with a changed pipeline trains nothing, and must say so."""
    path = model_dir / "pipeline.yaml"
    if not path.exists() or path.read_text(encoding="utf-8") == text:
        return None
    return (
        f"the pipeline differs from the one stored in {path} ({changes(path.read_text(encoding='utf-8'), text)}), "
        "which this finished run used; nothing was trained with the new one: run with --no-resume (the old run is "
        "set aside) or another runner.model_dir"
    )


def changes(old: str, new: str, most: int = 3) -> str:
    """What differs between two stored pipelines, as `key: old -> new` for the first `most` keys (a
    trial was told "the pipeline differs" and had to diff the files to find its own edit)."""
    import yaml

    try:
        found = _differences(yaml.safe_load(old), yaml.safe_load(new), "")
    except yaml.YAMLError:
        return "its text"
    shown = [f"{key or 'the whole'}: {_short(a)} -> {_short(b)}" for key, a, b in found[:most]]
    more = f", and {len(found) - most} more" if len(found) > most else ""
    return "; ".join(shown) + more if shown else "in its layout only"


_ABSENT = object()


def _differences(old: Any, new: Any, at: str) -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            found += _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{at}.{key}" if at else str(key))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for index, (a, b) in enumerate(zip(old, new)) for d in _differences(a, b, f"{at}[{index}]")]
    return [] if old == new else [(at, old, new)]


def _short(value: Any) -> str:
    if value is _ABSENT:
        return "(none)"
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(value: Any) -> bool:
    """Whether a metrics record's value is a number (a record also carries names, lists, None)."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


class ReplayedPhases:
    """The phase records a resumed run finds from its checkpoint's step on, by (mode, step).

    A checkpoint is written when a train phase ends, so a run stopped after the val phase that
    follows (or later, before the next checkpoint) resumes before it and runs those phases again:
    on the same weights, to the same values, which the writers of records (the metrics file,
    csv_logger, mlflow) leave out rather than record twice. A phase whose values differ (the
    pipeline changed in between, or --resume-from chose an older checkpoint) is recorded.
    """

    def __init__(self, records: list[dict[str, Any]] | None = None, step: int = 0) -> None:
        self.records: dict[tuple[str, int], dict[str, Any]] = {}
        for record in records or []:
            try:
                at = int(float(record.get("step")))  # type: ignore[arg-type]  # CSV values come back as strings
            except (TypeError, ValueError):
                continue
            if at >= step and isinstance(record.get("mode"), str):
                self.records[(record["mode"], at)] = record

    def holds(self, mode: str, step: int, values: dict[str, Any]) -> bool:
        """Whether (mode, step) was recorded with these values."""
        recorded = self.records.get((mode, step))
        return recorded is not None and all(
            is_number(recorded.get(name)) and math.isclose(float(recorded[name]), float(value), rel_tol=1e-9)
            for name, value in values.items() if is_number(value))


class MetricsFile:
    """Appends one record per phase to metrics.jsonl (or rewrites metrics.csv atomically)."""

    def __init__(self, model_dir: Path, fmt: str = "jsonl") -> None:
        self.format = fmt
        self.path = model_dir / f"metrics.{fmt}"  # its folder is made by the first record, not before
        self._repaired = False

    def write(self, record: dict[str, Any]) -> None:
        """Add `record`; safe against a crash and against another process writing the same file."""
        record = {"time": round(time.time(), 3), **record}
        with self._locked():
            if self.format == "jsonl":
                self._append_line(record)
            else:
                self._rewrite_csv(record)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock (flock) on a file beside the metrics file, held while one record is written.

        Without it a CSV rewrite (read, add, replace) of the trainer and one of a watcher
        would each keep only their own new row. The lock is on a separate file because the
        CSV file itself is replaced by each write; the kernel drops it if the holder dies.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / ".metrics.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _append_line(self, record: dict[str, Any]) -> None:
        # An append of one line: a crash loses at most this line, and a torn line left by
        # an earlier crash is cut off before the first append of this process.
        if not self._repaired:
            repair_torn_tail(self.path)
            self._repaired = True
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _rewrite_csv(self, record: dict[str, Any]) -> None:
        # The header grows when a record brings a new column, so the whole file is rewritten.
        rows = self.read() + [record]
        columns: list[str] = []
        for row in rows:
            columns += [key for key in row if key not in columns]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, buffer.getvalue())

    def read(self) -> list[dict[str, Any]]:
        """All records so far (CSV values come back as strings)."""
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        if self.format == "jsonl":
            return read_jsonl(text)
        return list(csv.DictReader(io.StringIO(text)))


def read_jsonl(text: str) -> list[dict[str, Any]]:
    """The records of a JSON-lines text; a torn last line (a crash mid-append) is left out."""
    lines = [line for line in text.splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                break  # the line a crash cut short; the next append removes it
            raise
    return records


def repair_torn_tail(path: Path) -> bool:
    """Cut a last line that has no newline (a crash mid-append) off `path`; True when it did."""
    try:
        with open(path, "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return False
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return False
            handle.seek(max(0, size - (1 << 20)))
            tail = handle.read()
            cut = tail.rfind(b"\n")
            handle.truncate(size - len(tail) + cut + 1 if cut >= 0 else max(0, size - len(tail)))
            return True
    except FileNotFoundError:
        return False
