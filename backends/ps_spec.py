"""`runner.backend: ps`: its settings (`runner.ps`), capabilities and own rule.

The registration of backends.ps (see dsl.language.backend_registry): a TF_CONFIG cluster that
`dslrun launch --backend ps` starts (chief, workers, ps tasks, an evaluator), asynchronous
in cluster mode (each update is one worker's batch), without loss scaling. Imports no
TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsl.language.backend_registry import Capabilities, ClusterLaunch, register_backend
from dsl.language.checks import written_at
from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath


def create(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    from backends.ps import ParameterServerBackend

    return ParameterServerBackend(runner_params, environ)


def doctor(facts: dict[str, Any]) -> str | None:
    return None if facts.get("parameter_server") else "this TensorFlow has no tf.distribute.ParameterServerStrategy"


def asynchronous(runner: Mapping[str, Any]) -> bool:
    """A cluster's workers update the variables one batch at a time; central storage sums its replicas'."""
    return bool((runner.get("ps") or {}).get("mode", "cluster") == "cluster")


def check_cluster_cache(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """inputter.cache cannot run on a ps cluster: each worker builds its data inside a graph,
    where the up-front cache pass cannot run."""
    runner = pipeline.get("runner", {})
    ps = runner.get("ps")
    cache = pipeline.get("inputter", {}).get("cache")
    if runner.get("backend") != "ps" or not isinstance(ps, dict) or ps.get("mode") != "cluster" or cache is not True:
        return []
    path: JsonPath = ("inputter", "cache")
    return [sources.diagnostic(
        path,
        f"inputter.cache: true is not supported by runner.ps.mode: cluster ({written_at(sources, ('runner', 'ps', 'mode'))}): "
        "each worker builds its own data in a graph, where the up-front cache pass cannot run; set inputter.cache: false",
    )]


SETTINGS: dict[str, dict[str, Any]] = {
    "ps": {
        "description": "Parameter-server settings, used when the backend is ps.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mode": {
                "description": (
                    "cluster: a TensorFlow parameter-server cluster described by TF_CONFIG (start one on this "
                    "machine with `dslrun launch --backend ps`); central_storage: one machine, variables on "
                    "its CPU and the step replicated on its GPUs."
                ),
                "type": "string",
                "enum": ["cluster", "central_storage"],
                "default": "cluster",
            },
            "variable_partitioner": {
                "description": (
                    "Split large variables across the ps tasks (cluster mode); null keeps each variable "
                    "whole on one ps task."
                ),
                "type": ["object", "null"],
                "additionalProperties": False,
                "properties": {
                    "min_shard_bytes": {
                        "description": "Smallest piece of a variable worth putting on its own ps task, in bytes.",
                        "type": "integer",
                        "minimum": 1,
                        "default": 262144,
                    },
                    "max_shards": {
                        "description": "Most pieces one variable is split into; null: the number of ps tasks.",
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "default": None,
                    },
                },
                "default": None,
            },
        },
        "default": {},
    },}

SPEC = register_backend(
    "ps",
    summary="a TensorFlow parameter-server cluster",
    title="parameter servers",
    create=create,
    settings=SETTINGS,
    capabilities=Capabilities(cluster=True, loss_scaling=False, asynchronous=asynchronous,
                              launchers=("dslrun launch", "TF_CONFIG")),
    order=3,
    doctor=doctor,
    launch=ClusterLaunch(settings=("runner.backend=ps", "runner.ps.mode=cluster"), parameter_servers=True,
                         help="ps (TensorFlow parameter servers)", default=True),
    refusals={"loss_scaling": "TensorFlow does not support with parameter servers"},
    checks=(check_cluster_cache,),
)
