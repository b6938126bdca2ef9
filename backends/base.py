"""The defaults every backend starts from: those of a single process.

A backend honours `dsl.engine.contracts.Backend` (placement and communication, nothing
else); the shared loop (dsl.engine.runner) never branches on its name. Backends depend on
the engine's contracts and step functions, never the other way round: the engine meets
them only at its composition root, dsl.commands._training.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from dsl.distributed.sync_batch_norm import BatchNormSync
from dsl.engine.contracts import ElasticRunner, Evaluator, ReconcileCall, StepCall, StepParts
from dsl.engine.global_batch import Replicas
from dsl.language.context import Placement


class Backend:
    """A single process: no sharding, no communication."""

    name = "local"
    # Whether a step's gradient is the in-graph average of every replica's (Horovod, collective):
    # then `average_across_replicas` may be called inside the train step.
    averages_in_step = False

    def __init__(self, runner_params: dict[str, Any] | None = None) -> None:
        self.runner_params = dict(runner_params or {})
        self.placement = Placement()

    def setup(self) -> None:
        """Initialise communication; called before any TensorFlow op is created."""

    @property
    def num_shards(self) -> int:
        return self.placement.world_size

    @property
    def shard_index(self) -> int:
        return self.placement.rank

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Context in which model, optimizer and metric variables are created (a
        tf.distribute strategy's scope places them on parameter servers, for example)."""
        return contextlib.nullcontext()

    def make_train_call(self, parts: StepParts) -> StepCall:
        """The compiled `train_call(iterator, num_steps)`; see dsl.engine.steps."""
        from dsl.engine.steps import make_train_call

        return make_train_call(parts.model, parts.modeler, parts.optimizer, parts.metrics["train"],
                               self.wrap_tape, parts.jit_compile, parts.traces, replicas=self.step_replicas(),
                               steps_per_call=parts.steps_per_call)

    def step_replicas(self) -> Replicas | None:
        """The replicas one optimizer step averages, with the in-graph mean over them, for a loss
        normalised by a count over the global batch (dsl.engine.global_batch); None for one
        replica, or a backend whose step is not an in-graph average of its replicas' (ps)."""
        if not self.averages_in_step or self.placement.world_size <= 1:
            return None
        return Replicas(self.average_across_replicas, self.placement.world_size)

    def make_reconcile_call(self, parts: StepParts) -> ReconcileCall | None:
        """The compiled call averaging the replica-local state (batch-norm statistics) over the
        replicas, which the runner makes every rank call where it is read (dsl.engine.replicas);
        None when there is nothing to average (one replica)."""
        if self.placement.world_size <= 1:
            return None
        from dsl.engine.replicas import make_reconcile_call

        return make_reconcile_call(parts.model, self.average_across_replicas)

    def make_val_call(self, parts: StepParts) -> StepCall:
        """The compiled `val_call(iterator, num_steps)`; see dsl.engine.steps."""
        from dsl.engine.steps import make_val_call

        return make_val_call(parts.model, parts.modeler, parts.metrics["val"], parts.traces)

    def make_iterator(self, dataset_fn: Callable[[], Any]) -> Any:
        """An iterator over the dataset `dataset_fn()` builds for this process."""
        return iter(dataset_fn())

    def trains(self) -> bool:
        """Whether this process trains (and, on the chief, owns the run directory's
        pipeline.yaml); an evaluator task only reads the checkpoints."""
        return True

    def replicas_in_step(self) -> int:
        """How many replicas' batches one optimizer step combines (dsl.distributed.scaling divides the
        global batch by it and scales the learning rate with it): the ranks of an allreduce,
        1 here."""
        return 1

    def asynchronous_workers(self) -> int:
        """How many workers update the variables without waiting for each other (dsl.distributed.scaling
        divides the learning rate by it, their mean staleness): 1 for a synchronous backend."""
        return 1

    def wrap_tape(self, tape: Any) -> Any:
        """The gradient tape whose `gradient` reduces across replicas; unchanged here."""
        return tape

    def broadcast(self, variables: list[Any]) -> None:
        """Make every replica hold the chief's values of `variables`; nothing to do here."""

    def prepare_model(self, model: Any, batch_norm: BatchNormSync) -> Any:
        """The network this backend trains, given the one the pipeline built and whether its batch
        norm is to be synchronised (dsl/distributed/sync_batch_norm.py: Horovod and collective swap its layers
        for synchronised ones); unchanged here. Called again with the model it returned when an
        elastic run changes size, and must then return that same model."""
        return model

    def average_across_replicas(self, tensors: list[Any]) -> list[Any]:
        """Each tensor's element-wise average over the replicas, inside a compiled call (the
        reconcile call averages batch-norm statistics with it); unchanged with one."""
        return tensors

    def sum_across_ranks(self, arrays: list[Any]) -> list[Any]:
        """Each numpy array summed element-wise over the replicas, exactly (float64 sums of
        counts stay integers): how metric states become one (dsl.engine.metric_reduction);
        a single process already has the sum."""
        return list(arrays)

    def gather_objects(self, value: Any) -> list[Any]:
        """`value` (picklable) from every replica, in rank order: for a metric whose result
        needs every rank's examples (dsl.engine.metric_reduction)."""
        return [value]

    def max_across_ranks(self, value: int) -> int:
        """The largest `value` any replica passed: lets ranks agree to stop together (a
        rank-local reason, like a NaN or a time budget, must not leave the others waiting)."""
        return value

    def gather_strings(self, value: str) -> list[str]:
        """`value` from every replica, in rank order (used to check weights agree)."""
        return [value]

    def run_training(self, runner: ElasticRunner, train: Callable[[], None]) -> None:
        """Run `train` (the runner's workflow from its current position) once.

        An elastic backend runs it again after ranks leave or join; see backends.horovod.
        """
        train()

    def run_task(self, runner: Evaluator) -> int | None:
        """The work of a task that does not train (a PS cluster's evaluator), returning its
        exit status; None, the default, lets the runner train."""
        return None

    def shutdown(self) -> None:
        """Release communication resources."""

    def describe(self) -> str:
        return f"{self.name} (1 process)"
