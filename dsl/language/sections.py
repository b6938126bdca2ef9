"""The pipeline's top-level keys and the `runner` section, as JSON Schema fragments.

Component sections (`inputter`, `augmenter`, `network`, `modeler`, `callbacks`) come from
the registry, and the backends' settings (`runner.horovod`, `runner.ps`, ...) from the
backend registry (dsl.language.backend_registry); everything else a pipeline may say is declared
here. `dsl.language.schema` assembles them into `schemas/pipeline.schema.json`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dsl.language import backend_registry
from dsl.language.diagnostics import Diagnostic, SourceMap

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

# The runner's own keys, before and after the backends' settings sections (the order of
# `dslrun show`, `dslrun list runner` and docs/components.md). `runner_params()` joins them.
_BEFORE_BACKENDS: dict[str, dict[str, Any]] = {
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
    "async_lr_scaling": {
        "description": (
            "How the learning rate follows the number N of workers that update the variables "
            "asynchronously (a parameter-server cluster): staleness divides it by N, the mean "
            "staleness of an update (each worker's gradient is computed on weights about N - 1 "
            "updates old; Zhang et al. 2016, staleness-aware async SGD); none keeps the rate of one "
            "process. Synchronous backends are not affected."
        ),
        "type": "string",
        "enum": ["staleness", "none"],
        "default": "staleness",
    },
    "async_momentum": {
        "description": (
            "How the optimizer's momentum (momentum, nesterov, rmsprop) follows the number N of "
            "workers that update the variables asynchronously (a parameter-server cluster): "
            "staleness lowers it by 1 - 1/N, the momentum their asynchrony adds by itself "
            "(Mitliagkas et al. 2016, asynchrony begets momentum), and at least to 0, so the two "
            "together are one process's; none keeps the momentum as written. Synchronous backends "
            "are not affected."
        ),
        "type": "string",
        "enum": ["staleness", "none"],
        "default": "staleness",
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
}


_AFTER_BACKENDS: dict[str, dict[str, Any]] = {
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
            "hardware has it (CPUs with AMX or AVX512-BF16, TPUs, NVIDIA Ampere and newer; docs/benchmarks.md, "
            "P1, has what it gave here). float16 is for NVIDIA GPUs "
            "with Tensor Cores (Volta and newer): the loss is scaled dynamically so small gradients "
            "do not underflow (the scale is checkpointed); slow on CPUs; not with backend ps."
        ),
        "type": "string",
        "enum": ["float32", "mixed_bfloat16", "mixed_float16"],
        "default": "float32",
    },
    "jit_compile": {
        "description": "XLA-compile the train step: auto (off on CPU, where it ran slower: docs/benchmarks.md, XLA on CPU), true or false.",
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

def runner_params() -> dict[str, dict[str, Any]]:
    """Every key of the `runner` section with its JSON Schema: `backend` (the registered
    backends), the runner's own keys, and the settings sections each backend declares
    (`runner.horovod`, `runner.ps`, ...; see dsl.language.backend_registry)."""
    params = {"backend": backend_param(), **_BEFORE_BACKENDS}
    for spec in backend_registry.backends():
        params.update(spec.settings)
    params.update(_AFTER_BACKENDS)
    return params


def backend_param() -> dict[str, Any]:
    """`runner.backend`: one of the registered backends, or `auto`, each described by its own registration."""
    specs = backend_registry.backends()
    named = ", ".join(f"`{spec.name}` ({spec.summary})" for spec in specs)
    picks = ", ".join(spec.auto_summary for spec in backend_registry.auto_order() if spec.auto_summary)
    return {
        "description": f"Where the loop runs: {named}, or `{backend_registry.AUTO}` ({picks}).",
        "type": "string",
        "enum": [backend_registry.AUTO, *(spec.name for spec in specs)],
        "default": backend_registry.AUTO,
    }


TOP_LEVEL: dict[str, dict[str, Any]] = {
    "version": {
        "description": "Version of the pipeline language. Only 1 exists.",
        "enum": list(SUPPORTED_VERSIONS),
    },
    "name": {
        "description": (
            "Short name of the pipeline; the default run directory is runs/<name>. "
            "Null or omitted: the pipeline file's name without extension (cifar10 for cifar10.yaml); never "
            "inherited through extends."
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
            "than the base's or tagged `!replace`; a list tagged `!append` goes after the base's, one "
            "tagged `!merge` merges each component into the base's item of its type (an item "
            "`!remove {type: X}` takes the base's X out), and one tagged `!replace` drops the base's "
            "components without a warning."
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

# Top-level sections declared beside the language, each by a module that calls `register_section`
# when imported: `sweep:` (dsl/sweep/section.py). Named by module path, as the registry names its
# component packages, so the language imports nothing above it.
SECTION_MODULES: tuple[str, ...] = ("dsl.sweep.section",)
SectionCheck = Callable[[dict[str, Any], SourceMap], list[Diagnostic]]
SECTION_CHECKS: dict[str, SectionCheck] = {}
_SECTIONS_LOADED = False


def register_section(name: str, schema: dict[str, Any], check: SectionCheck) -> None:
    """Declare the top-level section `name`: its schema fragment, and the check `validate` runs
    on the resolved pipeline after every other check (it may rerun them, as a sweep does per value)."""
    if name in TOP_LEVEL and SECTION_CHECKS.get(name) is not check:
        raise ValueError(f"the top-level section {name!r} is declared twice")
    TOP_LEVEL[name] = schema
    SECTION_CHECKS[name] = check


def load_sections() -> dict[str, SectionCheck]:
    """Import every module that declares a top-level section; the checks they registered."""
    global _SECTIONS_LOADED
    if not _SECTIONS_LOADED:
        for module in SECTION_MODULES:
            importlib.import_module(module)
        _SECTIONS_LOADED = True
    return SECTION_CHECKS
