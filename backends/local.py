"""The local backend: one process, all of its devices' default placement."""

from __future__ import annotations

from backends.base import Backend


class LocalBackend(Backend):
    """Train in this process only; the base class's defaults are exactly that."""

    name = "local"
