"""The pipeline's top-level keys and the `runner` section, as JSON Schema fragments.

Component sections (`inputter`, `augmenter`, `network`, `modeler`, `callbacks`) come from
the registry; everything else a pipeline may say is declared here. `dsl.schema` assembles
the two into `schemas/pipeline.schema.json`.
"""

from __future__ import annotations

from typing import Any

SUPPORTED_VERSIONS = (1,)


def fixed_array(*items: dict[str, Any]) -> dict[str, Any]:
    """An array of exactly these items, in this order ([mode, count], [height, width], ...):
    every place a parameter is a short tuple writes it through here."""
    return {"type": "array", "prefixItems": list(items), "minItems": len(items), "maxItems": len(items),
            "items": False}

# Which kind each component section holds; `callbacks` is a list of them.
COMPONENT_SECTIONS: dict[str, str] = {
    "inputter": "inputter",
    "augmenter": "augmenter",
    "network": "network",
    "modeler": "modeler",
    "callbacks": "callback",
}

REQUIRED_SECTIONS = ("version", "inputter", "network", "modeler", "runner")

WORKFLOW_MODES = ("train", "val")

RUNNER_PARAMS: dict[str, dict[str, Any]] = {
    "backend": {
        "description": (
            "Where the loop runs: `local` (one process), `horovod` (allreduce across the ranks "
            "horovodrun/mpirun started), `collective` (TensorFlow's own allreduce, "
            "MultiWorkerMirroredStrategy, across the workers TF_CONFIG names; no Horovod needed), "
            "`ps` (a TensorFlow parameter-server cluster), or `auto` (Horovod when started by "
            "horovodrun/mpirun, local otherwise)."
        ),
        "type": "string",
        "enum": ["auto", "local", "horovod", "collective", "ps"],
        "default": "auto",
    },
    "batch_scaling": {
        "description": (
            "What inputter.batch_size means on N replicas: none (the default) keeps it the global "
            "batch, each replica taking batch_size / N, so the steps per epoch and the learning rate "
            "are those of one process and N ranks learn what one does; linear makes it the batch of "
            "each replica, the global batch N x batch_size (1/N of the steps per epoch, the learning "
            "rate scaled by runner.lr_scaling). An asynchronous parameter-server cluster applies "
            "one worker's batch per update and scales nothing."
        ),
        "type": "string",
        "enum": ["none", "linear"],
        "default": "none",
    },
    "lr_scaling": {
        "description": (
            "How the learning rate follows the growth k of the global batch (runner.batch_scaling: "
            "linear): linear (x k, Goyal et al.; warm up over modeler.lr_schedule.warmup_epochs), "
            "sqrt (x sqrt(k)), none, or auto (linear for sgd/momentum/nesterov, sqrt for adaptive "
            "optimizers such as adam). With batch_scaling none the global batch does not grow and "
            "the rate is never scaled."
        ),
        "type": "string",
        "enum": ["auto", "linear", "sqrt", "none"],
        "default": "auto",
    },
    "divergence": {
        "description": (
            "Stop (or warn about) a run whose train loss explodes: NaN or infinite, or more than "
            "`factor` times its first value (and more than `factor` itself, so a run that starts "
            "near zero, fine-tuning say, is not stopped by noise) for `patience` train calls in a "
            "row, within the first `epochs` epochs or the whole run. The message names the learning rate in force, how it was "
            "scaled, the warmup and the settings to change."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "action": {
                "description": "stop (the run fails, exit 1, the diverged state not saved), warn (one line), or off.",
                "type": "string",
                "enum": ["stop", "warn", "off"],
                "default": "stop",
            },
            "factor": {
                "description": "A train loss above factor x the first train call's loss counts as exploded.",
                "type": "number",
                "exclusiveMinimum": 1,
                "default": 10.0,
            },
            "patience": {
                "description": (
                    "Train calls in a row above the bar before the loss counts as exploded: a loss "
                    "that spikes in the first steps and comes back (batch norm at a high rate without "
                    "warmup) is a transient. NaN or infinite counts at once."
                ),
                "type": "integer",
                "minimum": 1,
                "default": 3,
            },
            "epochs": {
                "description": "How long the check runs, in epochs from the start of the run (may be fractional); null: the whole run.",
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "default": None,
            },
        },
        "default": {},
    },
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
                    "Compute batch-norm statistics over the global batch (all ranks) in every training "
                    "step (Horovod's SyncBatchNormalization): for small per-rank batches. Costs one "
                    "allreduce per batch-norm layer and step. Off: each rank normalises with its own "
                    "batch, and the moving statistics are averaged across ranks after every call."
                ),
                "type": "boolean",
                "default": False,
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
    },
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
                    "Compute batch-norm statistics over the global batch (all workers) in every "
                    "training step (Keras BatchNormalization(synchronized=True)): for small per-worker "
                    "batches. Off: each worker normalises with its own batch, and the moving "
                    "statistics are averaged across workers after every call."
                ),
                "type": "boolean",
                "default": False,
            },
        },
        "default": {},
    },
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
    },
    "model_dir": {
        "description": (
            "Run directory: resolved pipeline, checkpoints, TensorBoard events, metrics. "
            "Re-running with the same directory resumes. Default: runs/<name>."
        ),
        "type": ["string", "null"],
        "default": None,
    },
    "workflow": {
        "description": (
            "Phases of one cycle, as in mmcv: [[train, 2], [val, 1]] trains 2 epochs (or "
            "iters) then validates once, repeated until max_epochs / max_iters."
        ),
        "type": "array",
        "minItems": 1,
        "items": {
            **fixed_array(
                {"type": "string", "enum": list(WORKFLOW_MODES), "description": "Mode of this phase."},
                {"type": "integer", "minimum": 1, "description": "Epochs (or iters) in this phase."},
            ),
            "description": "[mode, count]",
        },
        "default": [["train", 1]],
    },
    "max_epochs": {
        "description": "Train this many epochs (epoch-based). Give exactly one of max_epochs and max_iters.",
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
    },
    "max_iters": {
        "description": (
            "Train this many steps (iter-based); workflow counts are then steps and a val phase "
            "runs the whole val set. Give exactly one of max_epochs and max_iters."
        ),
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
    },
    "val_steps": {
        "description": "Batches per validation phase; null = the whole val set.",
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
    },
    "steps_per_call": {
        "description": "Train steps run inside one graph call (fewer Python round trips). Hooks see every call.",
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "default": 1,
    },
    "precision": {
        "description": (
            "Arithmetic of the network: float32, mixed_bfloat16 or mixed_float16 (Keras mixed "
            "precision: variables stay float32, layers compute in the 16-bit type; the loss is "
            "computed in float32). bfloat16 changes the numbers a little and is fast where the "
            "hardware has it (CPUs with AMX or AVX512-BF16, TPUs, NVIDIA Ampere and newer); measured "
            "1.2-2x on this project's Sapphire Rapids CPU for ResNet-32. float16 is for NVIDIA GPUs "
            "with Tensor Cores (Volta and newer): the loss is scaled dynamically so small gradients "
            "do not underflow (the scale is checkpointed); slow on CPUs; not with backend ps."
        ),
        "type": "string",
        "enum": ["float32", "mixed_bfloat16", "mixed_float16"],
        "default": "float32",
    },
    "jit_compile": {
        "description": "XLA-compile the train step: auto (off on CPU, where it measured 4.5x slower), true or false.",
        "anyOf": [{"type": "string", "enum": ["auto"]}, {"type": "boolean"}],
        "default": "auto",
    },
    "intra_op_threads": {
        "description": "TensorFlow intra-op threads (0 or null: TensorFlow decides).",
        "type": ["integer", "null"],
        "minimum": 0,
        "default": None,
    },
    "inter_op_threads": {
        "description": "TensorFlow inter-op threads (0 or null: TensorFlow decides).",
        "type": ["integer", "null"],
        "minimum": 0,
        "default": None,
    },
    "metrics_format": {
        "description": "Format of the metrics file in the run directory: jsonl (metrics.jsonl) or csv (metrics.csv).",
        "type": "string",
        "enum": ["jsonl", "csv"],
        "default": "jsonl",
    },
}

TOP_LEVEL: dict[str, dict[str, Any]] = {
    "version": {
        "description": "Version of the pipeline language. Only 1 exists.",
        "enum": list(SUPPORTED_VERSIONS),
    },
    "name": {
        "description": (
            "Short name of the pipeline; the default run directory is runs/<name>. "
            "Null or omitted: the pipeline file's name without extension (cifar10 for cifar10.yaml)."
        ),
        "type": ["string", "null"],
        "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        "default": None,
    },
    "description": {"description": "Free text for readers of the pipeline.", "type": "string", "default": ""},
    "extends": {
        "description": (
            "Base pipeline file(s), relative to this file. Mappings are deep-merged (this file "
            "wins); lists and scalars are replaced whole, and so is a mapping with another `type:` "
            "than the base's or tagged `!replace`."
        ),
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
    },
    "seed": {
        "description": "Seed for weights, shuffling and augmentation; null = a different run each time.",
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 2**32 - 1,
        "default": None,
    },
    "deterministic": {
        "description": "Make TensorFlow ops deterministic (slower); with a seed, reruns give identical weights.",
        "type": "boolean",
        "default": False,
    },
}
