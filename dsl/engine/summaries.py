"""TensorBoard writers of a run: one per mode under model_dir/tensorboard, on the chief only.

Off the chief every writer is a no-op, so callbacks write summaries without asking which
rank they are on; when Horovod elastic makes another rank the chief, the writers are made
again for the new role.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.language.context import Placement


class SummaryWriters:
    """`tf.summary` writers by mode, for this process's role."""

    def __init__(self, model_dir: Path, placement: Placement) -> None:
        self.model_dir = model_dir
        self.placement = placement
        self._writers: dict[str, Any] = {}
        self._for_chief = placement.is_chief

    def get(self, mode: str) -> Any:
        """The writer of `mode` (model_dir/tensorboard/<mode>); a no-op writer off the chief."""
        if self.placement.is_chief != self._for_chief:
            self.flush()
            self._writers, self._for_chief = {}, self.placement.is_chief
        if mode not in self._writers:
            if self.placement.is_chief:
                self._writers[mode] = tf.summary.create_file_writer(str(self.model_dir / "tensorboard" / mode))
            else:
                self._writers[mode] = tf.summary.create_noop_writer()
        return self._writers[mode]

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()
