"""`runner.backend: local`: one process; `auto`'s choice when no launcher started it.

The registration of backends.local (see dsl.language.backend_registry): no settings, the
capabilities of a single process. Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsl.language.backend_registry import always, register_backend


def create(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    from backends.local import LocalBackend

    return LocalBackend(runner_params)


SPEC = register_backend(
    "local",
    summary="one process",
    title="one process",
    create=create,
    order=0,
    auto=always,
    auto_summary="local otherwise",
)
