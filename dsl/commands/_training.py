"""From a resolved pipeline to a ready Runner: backend, TensorFlow settings, components.

The composition root, for `run`, `eval`, `predict` and `export`: the one module that meets the
concrete backends (`backends.select`) and the engine together; the engine knows a backend only
by `contracts.Backend`, and imports none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from backends.select import select_backend
from dsl.commands._common import BEST
from dsl.distributed.scaling import scaling_for
from dsl.distributed.sync_batch_norm import BatchNormSync, decide
from dsl.engine.best import best_model_dir
from dsl.engine.compiler import compile_pipeline, configure_tensorflow
from dsl.engine.replicas import has_batch_norm
from dsl.engine.runner import Runner
from dsl.language import backend_registry
from dsl.language.errors import DslError
from dsl.language.resolved import Pipeline


def build_runner(pipeline: Pipeline, *, resume: bool = True, resume_from: str | None = None) -> Runner:
    """Select and set up the backend, configure TensorFlow, compile every section."""
    runner = pipeline.runner
    backend = select_backend(runner.to_dict())
    backend.setup()
    spec = backend_registry.resolve(runner.backend, os.environ)
    elastic = spec.can("elastic", runner.params)
    if runner.settings.get("elastic") is not None and not elastic and backend.placement.is_chief:
        print(f"dslrun: runner.elastic has no effect on the {spec.name} backend: the ranks are fixed",
              file=sys.stderr, flush=True)
    scaling = scaling_for(pipeline, backend.replicas_in_step(), backend.asynchronous_workers())
    seed = configure_tensorflow(pipeline)
    decided: list[BatchNormSync] = []

    def prepare_model(model: Any) -> Any:
        """The backend's network, batch norm synchronised as the switch and this world decide."""
        decided.append(decide(runner.params, spec.capabilities.sync_batch_norm, scaling.batch_size,
                              scaling.replicas, has_batch_norm(model)))
        return backend.prepare_model(model, decided[-1])

    compiled = compile_pipeline(pipeline, backend.placement, seed, backend.scope(), prepare_model,
                                fresh_start=not resume, batch_size=scaling.batch_size)
    return Runner(compiled, backend, seed=seed, scaling=scaling, batch_norm=decided[-1], resume=resume,
                  resume_from=resume_from)


def single_process(pipeline: Pipeline) -> Pipeline:
    """`pipeline` for eval/predict/export: the checkpoints of a pipeline whose backend forms a
    cluster (ps, collective: the `cluster` capability) are read on `auto`'s fallback, the
    local backend.

    They need no cluster, and a cluster pipeline would wait for TF_CONFIG and its servers.
    """
    runner = pipeline.runner
    if any(spec.can("cluster", runner.params) for spec in backend_registry.candidates(runner.params)):
        return pipeline.with_runner(runner.with_backend(backend_registry.fallback().name))
    return pipeline


def restored_runner(pipeline: Pipeline, checkpoint: str | None) -> Runner:
    """A runner holding trained weights (`checkpoint`, or the run directory's latest), in this process.

    `checkpoint` is the user's `--checkpoint`: a prefix, a directory, or `best` for the run
    directory's best model (best/, written by checkpoint.save_best).
    """
    if checkpoint == BEST:
        checkpoint = best_model_dir(Path(pipeline.runner.model_dir))
    elif checkpoint is not None and Path(pipeline.runner.model_dir).resolve() not in Path(checkpoint).resolve().parents:
        from dsl.engine.checkpoint_paths import other_task
        from dsl.language.rules import declared_classes

        inputter = {**pipeline.inputter.arguments(), "type": pipeline.inputter.type}
        classes = declared_classes(inputter) or []  # another run's: its classes were its task's
        problem = other_task(checkpoint, classes)
        if problem:
            raise DslError(f"--checkpoint {checkpoint}: {problem}, not this pipeline's ({', '.join(classes[:10])}"
                           f"{', ...' if len(classes) > 10 else ''}): its scores and names would be another task's; "
                           "give a checkpoint of this task (fine-tune that one with init_checkpoint first)")
    runner = build_runner(single_process(pipeline), resume=True, resume_from=checkpoint)
    runner.restore(weights_only=True, option="--checkpoint")
    if not runner.resumed:
        raise DslError(
            f"no checkpoint in {runner.model_dir / 'checkpoints'}; train the pipeline first or pass --checkpoint PATH"
        )
    return runner
