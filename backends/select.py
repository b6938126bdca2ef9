"""Pick the backend a pipeline asks for (`runner.backend`), `auto` from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from backends.base import Backend
from dsl.errors import DslError

# Variables set by horovodrun (HOROVOD_*), OpenMPI's mpirun (OMPI_*) and PMI launchers.
_LAUNCHER_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def launched_by_distributed_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether horovodrun or mpirun started this process."""
    env = os.environ if environ is None else environ
    return any(name in env for name in _LAUNCHER_VARIABLES)


def select_backend(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Backend:
    """The backend instance for `runner.backend`; a clear error for one that is unavailable."""
    name = runner_params.get("backend", "auto")
    if name == "auto":
        name = "horovod" if launched_by_distributed_launcher(environ) else "local"
    if name == "local":
        from backends.local import LocalBackend

        return LocalBackend(runner_params)
    if name == "horovod":
        from backends.horovod import HorovodBackend

        return HorovodBackend(runner_params)
    if name == "ps":
        from backends.ps import ParameterServerBackend

        return ParameterServerBackend(runner_params, environ)
    if name == "collective":
        from backends.collective import CollectiveBackend

        return CollectiveBackend(runner_params, environ)
    raise DslError(
        f"runner.backend resolved to {name!r}, which this version of dslrun does not provide "
        "(available: local, horovod, ps, collective). Run without horovodrun/mpirun, or set runner.backend: local."
    )
