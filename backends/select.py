"""Pick the backend a pipeline asks for (`runner.backend`), `auto` from the environment.

Every backend is a registration (dsl.language.backend_registry, `backends/*_spec.py` or a plugin):
this module asks the registry, so a new backend needs no edit here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from backends.base import Backend
from dsl.language import backend_registry
from dsl.language.errors import DslError, RegistryError


def launched_by_distributed_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher `auto` recognises (horovodrun, mpirun, ...) started this process."""
    env = os.environ if environ is None else environ
    return any(spec.auto is not None and spec.auto is not backend_registry.always and spec.auto(env)
               for spec in backend_registry.auto_order())


def select_backend(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Backend:
    """The backend instance for `runner.backend`; a clear error for one that is unavailable."""
    env = os.environ if environ is None else environ
    name = runner_params.get("backend", backend_registry.AUTO)
    try:
        spec = backend_registry.resolve(name, env)
    except RegistryError:
        raise DslError(
            f"runner.backend resolved to {name!r}, which this version of dslrun does not provide "
            f"(available: {', '.join(backend_registry.names())}). Run without horovodrun/mpirun, or set "
            f"runner.backend: {backend_registry.fallback().name}."
        ) from None
    backend: Backend = spec.create(runner_params, environ)
    return backend
