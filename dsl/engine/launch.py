"""From a resolved pipeline to a ready Runner: backend, TensorFlow settings, components."""

from __future__ import annotations

from typing import Any

from backends.select import select_backend
from dsl.engine.compiler import compile_pipeline, configure_tensorflow
from dsl.engine.runner import Runner
from dsl.errors import DslError


def build_runner(spec: dict[str, Any], *, resume: bool = True, resume_from: str | None = None) -> Runner:
    """Select and set up the backend, configure TensorFlow, compile every section."""
    backend = select_backend(spec["runner"])
    backend.setup()
    seed = configure_tensorflow(spec)
    compiled = compile_pipeline(spec, backend.placement, seed, backend.scope(), backend.prepare_model)
    return Runner(compiled, backend, seed=seed, resume=resume, resume_from=resume_from)


def single_process(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` for eval/predict/export: a ps pipeline's checkpoints are read on the local backend.

    They need no cluster, and a cluster pipeline would wait for TF_CONFIG and its servers.
    """
    if spec["runner"].get("backend") == "ps":
        spec = {**spec, "runner": {**spec["runner"], "backend": "local"}}
    return spec


def restored_runner(spec: dict[str, Any], checkpoint: str | None) -> Runner:
    """A runner holding trained weights (`checkpoint`, or the run directory's latest), in this process."""
    runner = build_runner(single_process(spec), resume=True, resume_from=checkpoint)
    runner.restore(weights_only=True)
    if not runner.resumed:
        raise DslError(
            f"no checkpoint in {runner.model_dir / 'checkpoints'}; train the pipeline first or pass --checkpoint PATH"
        )
    return runner
