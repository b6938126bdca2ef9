"""`csv_logger`: one row per phase in a CSV file, the history a spreadsheet or pandas reads.

A resumed run appends to the same file. Each row is flushed and fsynced as it is written,
so a killed run loses at most the row being written; when a phase brings an output the
header lacks, the file is rewritten with the wider header (to a temporary file, then
renamed over the old one).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from dsl.engine.hooks import Callback
from dsl.language.registry import register

_FIRST_COLUMNS = ["mode", "epoch", "step"]


@register(
    "callback",
    "csv_logger",
    params={
        "filename": {
            "description": "The CSV file, relative to the run directory (model_dir) unless absolute.",
            "type": "string",
            "minLength": 1,
            "default": "history.csv",
        },
    },
)
class CsvLogger(Callback):
    """Append one CSV row per train or val phase (mode, epoch, step and every output) to a file in the run directory."""

    priority = "LOW"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        self.path = Path(runner.model_dir) / self.params["filename"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns = self._read_header()

    def _read_header(self) -> list[str]:
        try:
            with open(self.path, newline="", encoding="utf-8") as handle:
                return next(csv.reader(handle), [])
        except FileNotFoundError:
            return []

    def after_epoch(self, runner: Any) -> None:
        if runner.phase_recorded_before:
            return  # written before the run was resumed
        row = {"mode": runner.mode, "epoch": runner.epoch, "step": runner.step, **runner.phase_outputs}
        if any(name not in self.columns for name in row):
            base = self.columns or list(_FIRST_COLUMNS)
            self._widen(base + sorted(name for name in row if name not in base))
        self._append(row)

    def _widen(self, columns: list[str]) -> None:
        """Rewrite the file with `columns` as its header; old rows get empty new cells."""
        rows = []
        if self.path.exists():
            with open(self.path, newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        self.columns = columns

    def _append(self, row: dict[str, Any]) -> None:
        text = io.StringIO()
        csv.DictWriter(text, self.columns).writerow(row)
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            handle.write(text.getvalue())
            handle.flush()
            os.fsync(handle.fileno())
