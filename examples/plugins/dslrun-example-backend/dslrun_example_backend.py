"""`runner.backend: example`: one process that says where it runs, with its own `runner.example`.

A backend is where the shared loop runs: placement (rank, world size), how a step's gradients
and metrics are combined across replicas, and how the job is orchestrated. This one is a single
process, so it inherits everything from `backends.base.Backend` and adds a greeting. Its
registration says what it can do (`Capabilities`): `dslrun validate` refuses, at the line, a
pipeline that asks it for more (`runner.elastic`, `mixed_float16` loss scaling, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from dsl.language.backend_registry import Capabilities, register_backend


def create(runner_params: dict[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    """The backend for one run; TensorFlow is imported only here, when a pipeline runs on it."""
    from backends.base import Backend

    class ExampleBackend(Backend):
        name = "example"

        def setup(self) -> None:
            print(f"example backend: {self.runner_params['example']['greeting']}", file=sys.stderr, flush=True)

        def describe(self) -> str:
            return "example (1 process)"

    return ExampleBackend(runner_params)


register_backend(
    "example",
    summary="the example plug-in's single process",
    title="the example backend",
    create=create,
    settings={"example": {
        "description": "The example backend's settings.",
        "type": "object",
        "additionalProperties": False,
        "properties": {"greeting": {"description": "Printed at set-up.", "type": "string", "default": "hello"}},
        "default": {},
    }},
    capabilities=Capabilities(loss_scaling=False),
    doctor=lambda facts: None,
)
