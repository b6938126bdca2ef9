"""`runner.backend: horovod`: its settings (`runner.horovod`, `runner.elastic`) and capabilities.

The registration of backends.horovod (see dsl.language.backend_registry): elastic, synchronised batch
norm through `runner.horovod.sync_batch_norm`, started by horovodrun or mpirun, which is how
`runner.backend: auto` recognises it. Imports no TensorFlow and no Horovod.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsl.language.backend_registry import Capabilities, RanksLaunch, StackReport, register_backend

# Variables set by horovodrun (HOROVOD_*), OpenMPI's mpirun (OMPI_*) and PMI launchers.
LAUNCHER_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def started_by_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether horovodrun or mpirun started this process."""
    env = os.environ if environ is None else environ
    return any(name in env for name in LAUNCHER_VARIABLES)


def rank(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, size) as horovodrun (HOROVOD_*) or Open MPI's mpirun (OMPI_COMM_WORLD_*) set them."""
    for rank_name, size_name in (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_name in environ:
            try:
                return int(environ[rank_name]), int(environ.get(size_name, "1"))
            except ValueError:
                return None
    return None


def horovodrun(ranks: int, hosts: Sequence[str], network_interfaces: str | None, argv: Sequence[str]) -> list[str]:
    """`horovodrun -np N [-H hosts] [--network-interfaces ...] --gloo ARGV`, the horovodrun of this
    interpreter's environment first (a venv's bin/ need not be on the PATH)."""
    found = shutil.which("horovodrun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    placement = ["-H", ",".join(hosts)] if hosts else []
    placement += ["--network-interfaces", network_interfaces] if network_interfaces else []
    return [found or "horovodrun", "-np", str(ranks), *placement, "--gloo", *argv]


def create(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    from backends.horovod import HorovodBackend

    return HorovodBackend(runner_params)


def doctor(facts: dict[str, Any]) -> str | None:
    """Why Horovod cannot start ranks here (None: it can), from `dslrun doctor`'s facts."""
    horovod = facts.get("horovod")
    if horovod is None:
        return ("Horovod is not installed or does not import (make install builds it); "
                "the collective backend needs no build")
    if not any(horovod["controllers"].values()):
        return "Horovod was built without Gloo and MPI: no controller can start ranks"
    return None


# ---------------------------------------------------------------- what `dslrun doctor` reports
def _build(horovod: Any) -> dict[str, Any] | None:
    """What `make install` wrote beside Horovod when it built it (dslrun_build.json), if it did."""
    import json

    try:
        return dict(json.loads(Path(horovod.__file__).with_name("dslrun_build.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def collect() -> dict[str, Any] | None:
    """Horovod's version, how it was built, and what it was built with (what `horovodrun
    --check-build` shows); None when it is not installed or does not import."""
    try:
        import horovod.tensorflow as hvd
    except Exception:
        return None
    import horovod

    return {
        "version": horovod.__version__,
        "build": _build(horovod),
        "frameworks": {"TensorFlow": True},
        "controllers": {"MPI": bool(hvd.mpi_built()), "Gloo": bool(hvd.gloo_built())},
        "tensor_operations": {
            "NCCL": bool(hvd.nccl_built()), "DDL": bool(hvd.ddl_built()), "CCL": bool(hvd.ccl_built()),
            "MPI": bool(hvd.mpi_built()), "Gloo": bool(hvd.gloo_built()),
        },
    }


def report(horovod: dict[str, Any] | None) -> list[str]:
    """doctor's lines about Horovod: version and build, then its frameworks, controllers and ops."""
    if not horovod:
        return ["Horovod     not installed (make install builds it)"]
    build = horovod["build"]
    how = ("(not built by make install: its build is unknown)" if not build else
           f"built from source by make install against TensorFlow {build.get('tensorflow')} "
           f"(Python {build.get('python')}), with {build.get('patch')}: XLA ops left out")
    lines = [f"Horovod     {horovod['version']}  {how}"]
    for title, key in (("frameworks", "frameworks"), ("controllers", "controllers"), ("tensor ops", "tensor_operations")):
        lines.append(f"  {title:<10} " + "  ".join(f"{'[X]' if built else '[ ]'} {name}"
                                                   for name, built in horovod[key].items()))
    return lines


SETTINGS: dict[str, dict[str, Any]] = {
    "horovod": {
        "description": "Horovod settings, used when the backend is horovod.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "compression": {
                "description": "Gradient compression on the wire: none, or fp16 (half the bytes).",
                "type": "string",
                "enum": ["none", "fp16"],
                "default": "none",
            },
            "op": {
                "description": "How gradients are combined: average, sum, or adasum.",
                "type": "string",
                "enum": ["average", "sum", "adasum"],
                "default": "average",
            },
            "gradient_predivide_factor": {
                "description": "Divide gradients by this before the sum and by size/factor after (average only).",
                "type": "number",
                "exclusiveMinimum": 0,
                "default": 1.0,
            },
            "num_groups": {
                "description": "Split the gradient allreduce into this many groups (0: Horovod's fusion decides).",
                "type": "integer",
                "minimum": 0,
                "default": 0,
            },
            "sync_batch_norm": {
                "description": (
                    "Compute batch-norm statistics over the global batch (all ranks) in every training step "
                    "(each rank's per-channel count, mean and variance gathered, weighted by its examples). "
                    "auto: on when the network has batch normalisation and "
                    "each rank normalises fewer than 16 examples (the global batch divided by the ranks), "
                    "decided again when an elastic run changes size; true/false force it. Costs one allgather "
                    "per batch-norm layer and step. Off: each rank normalises with its own batch, and the "
                    "moving statistics are averaged across ranks where they are read (val, checkpoints, the end)."
                ),
                "enum": [True, False, "auto"],
                "default": "auto",
            },
            "fusion_threshold_mb": {
                "description": "Tensor fusion buffer in MiB (HOROVOD_FUSION_THRESHOLD); null: Horovod's 64.",
                "type": ["number", "null"],
                "minimum": 0,
                "default": None,
            },
            "cycle_time_ms": {
                "description": (
                    "Milliseconds between Horovod's coordination cycles (HOROVOD_CYCLE_TIME); null: 5 on "
                    "CPU-only hosts (each cycle costs CPU there), Horovod's default (1) with GPUs."
                ),
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "default": None,
            },
            "timeline": {
                "description": "Write a Horovod timeline (Chrome trace JSON) to this file; null: none.",
                "type": ["string", "null"],
                "default": None,
            },
            "autotune": {
                "description": "Let Horovod tune fusion threshold and cycle time while training (HOROVOD_AUTOTUNE).",
                "type": "boolean",
                "default": False,
            },
            "stall_check_seconds": {
                "description": "Warn when a rank has not joined a collective for this long (HOROVOD_STALL_CHECK_TIME_SECONDS).",
                "type": "integer",
                "minimum": 1,
                "default": 15,
            },
            "stall_shutdown_seconds": {
                "description": (
                    "Shut the job down when a collective has stalled this long, so a lost rank ends "
                    "the job instead of hanging it (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)."
                ),
                "type": "integer",
                "minimum": 1,
                "default": 45,
            },
        },
        "default": {},
    },
    "elastic": {
        "description": (
            "Horovod elastic training: ranks may leave (a lost host) and join (the discovery script "
            "lists it again) while the job goes on. Used when started by `horovodrun --min-np N "
            "--max-np M --host-discovery-script SCRIPT` (Gloo); null keeps the defaults below there "
            "and has no effect elsewhere."
        ),
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {
            "min_workers": {
                "description": "Fewest ranks worth training with; below it the run stops (match horovodrun --min-np).",
                "type": "integer",
                "minimum": 1,
                "default": 1,
            },
            "max_workers": {
                "description": "Most ranks the run may grow to (match horovodrun --max-np); null: no limit.",
                "type": ["integer", "null"],
                "minimum": 1,
                "default": None,
            },
            "commit_every_n_steps": {
                "description": (
                    "Keep a copy of the training state in memory every N train steps: a lost rank "
                    "costs at most N steps, and ranks join at these points. Rounded up to a whole "
                    "runner.steps_per_call."
                ),
                "type": "integer",
                "minimum": 1,
                "default": 20,
            },
        },
        "default": None,
    },}

SPEC = register_backend(
    "horovod",
    summary="allreduce across the ranks horovodrun/mpirun started",
    title="Horovod",
    create=create,
    settings=SETTINGS,
    capabilities=Capabilities(elastic=True, sync_batch_norm="horovod.sync_batch_norm",
                              launchers=("horovodrun", "mpirun")),
    order=1,
    auto=started_by_launcher,
    auto_summary="Horovod when started by horovodrun/mpirun",
    doctor=doctor,
    ranks=RanksLaunch("horovodrun", horovodrun, places_on_hosts=True),
    rank=rank,
    stack=StackReport("horovod", collect, report),
)
