"""`synthetic`: images made in memory, for benchmarks and smoke tests — no files at all.

A small pool of images is generated once from `seed` and indexed by the pipeline, so the
input costs almost nothing and a benchmark measures the model. Each image is noise around
a colour of its class, so the loss does fall (a smoke test can see learning), but the
task is trivial: use `dslrun data synthetic` for a data set worth validating on.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import COMMON_PARAMS, MODES, image_shape_param
from dsl.language.context import BuildContext
from dsl.language.registry import register

DEFAULT_COUNTS = {"train": 1024, "val": 256, "test": 256}

PARAMS: dict[str, dict[str, Any]] = {
    "num_examples": {
        "description": "Examples per mode, e.g. {train: 1024, val: 256, test: 256}; 0 = no data for that mode.",
        "type": "object",
        "properties": {
            mode: {"type": "integer", "minimum": 0, "default": count, "description": f"Examples of the {mode} mode."}
            for mode, count in DEFAULT_COUNTS.items()
        },
        "additionalProperties": False,
        "default": dict(DEFAULT_COUNTS),
    },
    "image_shape": image_shape_param([32, 32, 3]),
    "num_classes": {
        "description": "Number of classes of the generated labels.",
        "type": "integer",
        "minimum": 2,
        "default": 10,
    },
    "pool_size": {
        "description": "Distinct images generated per mode; examples beyond it repeat them (bigger = more memory).",
        "type": "integer",
        "minimum": 1,
        "default": 256,
    },
    "seed": {
        "description": "Seed of the generated images and labels (same seed, same data, whatever the pipeline seed).",
        "type": "integer",
        "minimum": 0,
        "default": 0,
    },
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """Nothing to read for `dslrun validate --data`: only how many examples `mode` has."""
    from dsl.data_check.examples import Split

    counts = {**DEFAULT_COUNTS, **(params.get("num_examples") or {})}
    return Split([], source="generated in memory", count=int(counts[mode]))


@register("inputter", "synthetic", params=PARAMS, examples=examples, batch=("image", "class"))
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Generated in-memory images (noise around a per-class colour) for benchmarks; no files.

    A generator of `num_examples` examples per mode.
    """
    from dsl.tasks.image_classification._readers import SyntheticInputter

    counts = {**DEFAULT_COUNTS, **(params["num_examples"] or {})}
    return SyntheticInputter(params, {mode: int(counts[mode]) for mode in MODES})
