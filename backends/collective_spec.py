"""`runner.backend: collective`: its settings (`runner.collective`) and capabilities.

The registration of backends.collective (see dsl.language.backend_registry): a TF_CONFIG cluster that
`dslrun launch --backend collective` starts, every task training; synchronised batch norm
through `runner.collective.sync_batch_norm`; its settings are an error on another backend.
Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsl.language.backend_registry import Capabilities, ClusterLaunch, register_backend


def create(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    from backends.collective import CollectiveBackend

    return CollectiveBackend(runner_params, environ)


def doctor(facts: dict[str, Any]) -> str | None:
    # MultiWorkerMirroredStrategy ships with TensorFlow: TF_CONFIG and ports are all it needs.
    return None if facts.get("multi_worker_mirrored") else "this TensorFlow has no tf.distribute.MultiWorkerMirroredStrategy"


SETTINGS: dict[str, dict[str, Any]] = {
    "collective": {
        "description": (
            "TensorFlow collective allreduce settings (MultiWorkerMirroredStrategy), used when the "
            "backend is collective. Start the workers with `dslrun launch --backend collective`, or "
            "set TF_CONFIG on every host."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "communication": {
                "description": (
                    "All-reduce implementation: auto (TensorFlow picks: NCCL on GPUs, ring otherwise), "
                    "ring (gRPC, any device), or nccl (NVIDIA GPUs)."
                ),
                "type": "string",
                "enum": ["auto", "ring", "nccl"],
                "default": "auto",
            },
            "heartbeat_timeout_seconds": {
                "description": (
                    "A worker that sends no heartbeat for this long is declared lost, and the others "
                    "stop with an error naming it instead of waiting in a collective forever."
                ),
                "type": "number",
                "minimum": 1,
                "default": 20,
            },
            "timeout_seconds": {
                "description": (
                    "Fail any single collective that takes longer than this (a worker alive but "
                    "stuck); null: no limit. Keep it above the longest pause of one worker, such as "
                    "the chief writing a checkpoint."
                ),
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "default": None,
            },
            "sync_batch_norm": {
                "description": (
                    "Compute batch-norm statistics over the global batch (all workers) in every training step "
                    "(Keras BatchNormalization(synchronized=True)). auto: on when the network has batch "
                    "normalisation and each worker normalises fewer than 16 examples (the global batch divided "
                    "by the workers); true/false force it. Costs one allreduce per batch-norm layer and step. "
                    "Off: each worker normalises with its own batch, and the moving statistics are averaged "
                    "across workers where they are read (val, checkpoints, the end)."
                ),
                "enum": [True, False, "auto"],
                "default": "auto",
            },
        },
        "default": {},
    },}

SPEC = register_backend(
    "collective",
    summary=("TensorFlow's own allreduce, MultiWorkerMirroredStrategy, across the workers TF_CONFIG names; "
             "no Horovod needed"),
    title="collective",
    create=create,
    settings=SETTINGS,
    capabilities=Capabilities(cluster=True, sync_batch_norm="collective.sync_batch_norm", exclusive_settings=True,
                              launchers=("dslrun launch", "TF_CONFIG")),
    order=2,
    doctor=doctor,
    launch=ClusterLaunch(settings=("runner.backend=collective",), parameter_servers=False,
                         help="collective (TensorFlow allreduce)"),
)
