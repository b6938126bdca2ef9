"""The contracts of the shared loop: what each section, each backend and each callback may rely on.

The engine owns them; components and backends are checked against them (`make lint` runs
the type checker strict on dsl/engine/ and backends/). They are Protocols, so a plugin's
component honours one by having the methods, without importing or subclassing anything.

Tensor, dataset and Keras types are written `Any`-valued aliases: TensorFlow ships no type
information, and this module must import without TensorFlow (`dslrun validate` reads the
callbacks, whose base class names `RunnerView`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dsl.language.context import BuildContext, Placement
from dsl.language.errors import DslError
from dsl.language.resolved import Pipeline

if TYPE_CHECKING:
    from dsl.distributed.scaling import Scaling
    from dsl.distributed.sync_batch_norm import BatchNormSync

Tensor = Any  # tf.Tensor
Dataset = Any  # tf.data.Dataset
Model = Any  # tf.keras.Model
Optimizer = Any  # tf.keras.optimizers.Optimizer
Metric = Any  # tf.keras.metrics.Metric
Variable = Any  # tf.Variable
Tape = Any  # tf.GradientTape, or a backend's wrapper of it

#: The compiled `call(iterator, num_steps)` of a phase: tensors out, per output name.
StepCall = Callable[[Any, Tensor], dict[str, Tensor]]
#: A backend's element-wise average of tensors over the replicas, inside a compiled call.
Average = Callable[[list[Tensor]], list[Tensor]]
#: A backend's compiled call averaging the replica-local state over the replicas (every rank calls it at once).
ReconcileCall = Callable[[], None]

MODES = ("train", "val", "test")


class Augmenter(Protocol):
    """Per-example transforms of a batch element `(features, targets)`, run in the inputter's `map`.

    `train` sees both, so a geometric transform (crop, flip, scale) moves an image and its
    mask together; `eval` sees the features only (val, test, predict and serving have no
    targets to move), and must be deterministic. An augmenter with `changes_data = False`
    is left out of the pipeline altogether.
    """

    def train(self, features: Tensor, targets: Tensor, seed: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Random augmentation plus normalisation; `seed` int64 [2], stateless (per example)."""
        ...

    def eval(self, features: Tensor) -> Tensor:
        """Deterministic normalisation only, for val/test/predict/serving."""
        ...


#: An example transform as the inputter maps it: `(features, targets[, seed]) -> (features, targets)`.
ExampleTransform = Callable[..., tuple[Tensor, Tensor]]


class ServingInput(Protocol):
    """One input a client may send to the exported model.

    `spec` is the batched TensorSpec the serving signature takes (its name is the input's
    name); `to_features` turns such a batch into the features the inputter's datasets hold
    (decoding, vectorising), inside the graph; `keep` are the objects whose state it uses
    (lookup tables), which the SavedModel must track; `description` is for the user.
    """

    name: str
    spec: Any  # tf.TensorSpec
    to_features: Callable[[Tensor], Tensor]
    keep: list[Any]
    description: str


class Inputter(Protocol):
    """Reads a data set and makes batched `tf.data` pipelines of `(features, targets)` per mode.

    The structure of a batch is the inputter's and the modeler's business: the engine and
    the backends pass it through. What the data is (an image shape, a vocabulary, a number
    of classes) reaches the other sections as `facts()`, merged into their BuildContext.
    """

    def facts(self) -> dict[str, Any]:
        """What the other sections may know of the data: BuildContext field -> value."""
        ...

    def has_source(self, mode: str) -> bool:
        """Whether the pipeline declares data for `mode` ('train', 'val' or 'test')."""
        ...

    def num_examples(self, mode: str) -> int:
        """Examples in `mode`'s data."""
        ...

    def dataset(self, mode: str, augment: ExampleTransform | None = None, num_shards: Any = 1,
                shard_index: Any = 0, seed: Any = None, batch_size: int | None = None) -> Dataset:
        """Batches of `mode`, sharded over the examples before shuffling (each rank a disjoint
        part), train data shuffled by `seed` and not repeated (one epoch); `augment` is mapped
        over the examples before batching. `seed` may be an int64 scalar tensor: the loop
        builds every epoch inside one dataset (`tf.data` function), and an epoch must then
        be what the same int seed gives. `batch_size` is this replica's batch (the global
        `inputter.batch_size` divided by the replicas, dsl.distributed.scaling); None: `inputter.batch_size`."""
        ...

    def steps_per_epoch(self, batch_size: int | None, world_size: int) -> int | None:
        """Train steps of one epoch when `world_size` replicas take `batch_size` examples each
        (None: `inputter.batch_size`), the same on every rank; None without train data."""
        ...

    def explain_error(self, exc: Any) -> DslError | None:
        """A TensorFlow error raised while reading this data, as a DslError naming the file at
        fault; None when the data is not the cause."""
        ...

    def skipped_examples(self, mode: str) -> int | None:
        """Examples of `mode` that `inputter.skip_corrupt` left out, when they are counted up
        front (reported as the phase output `skipped_examples`); None otherwise."""
        ...

    def serving_inputs(self) -> list[ServingInput]:
        """The inputs the exported model takes, the first its `serving_default`."""
        ...

    def predict_inputs(self, paths: list[str], texts: list[str]) -> list[tuple[dict[str, Any], Tensor]]:
        """`dslrun predict`'s arguments as (what names the input, its features) pairs, the
        features one unbatched example; raises DslError naming every unreadable one."""
        ...


class NetworkBuilder(Protocol):
    """A `network` component's `build(params, context)`: a Keras model of the inputter's data."""

    def __call__(self, params: dict[str, Any], context: BuildContext) -> Model: ...


class Modeler(Protocol):
    """Loss, optimizer, learning-rate schedule and metrics (TF Model Garden's Task)."""

    params: dict[str, Any]  # the modeler section, defaults filled (optimizer, lr_schedule, ...)

    def learning_rate(self, steps_per_epoch: int, scale: float = 1.0) -> Any:
        """A float or a LearningRateSchedule of the global step; `scale` multiplies the base rate."""
        ...

    def optimizer(self, steps_per_epoch: int, scale: float = 1.0, momentum: float | None = None) -> Optimizer:
        """A fresh Keras optimizer using `learning_rate(steps_per_epoch, scale)`; `momentum` replaces the section's."""
        ...

    def loss(self, targets: Tensor, outputs: Tensor, model: Model) -> dict[str, Tensor]:
        """{'loss': the total to minimise, ...its parts} (scalars), from a batch's targets
        and the network's outputs; a loss divided by a count over its batch (positive anchors,
        tokens) also gives that count as 'weight', which a val phase weighs the batch by (else
        its examples)."""
        ...

    def metrics(self, mode: str) -> dict[str, Metric]:
        """Fresh stateful metrics for `mode`, updated with `update_state(targets, outputs)`.

        Across ranks a metric's variables are summed and its result computed from the sums
        (dsl.engine.metric_reduction): keep totals and counts, never a running ratio. A metric
        that sums cannot express declares `reduction_across_ranks = "gather"` with
        `local_results()` and `result_from(parts)`.
        """
        ...

    def predictions(self, outputs: Tensor) -> dict[str, Tensor]:
        """What `predict` and the serving signature return for a batch of network outputs."""
        ...

    def record(self, source: dict[str, Any], predictions: dict[str, Any], features: Any,
               options: dict[str, Any]) -> dict[str, Any]:
        """The JSON record `dslrun predict` prints for one input (numpy predictions of a
        batch of one); may write files (a mask PNG) where `options['out']` says."""
        ...


class StepParts(Protocol):
    """What a backend needs to compile the step functions (the runner provides it)."""

    model: Model
    modeler: Modeler
    optimizer: Optimizer
    metrics: dict[str, dict[str, Metric]]
    jit_compile: bool
    steps_per_call: int  # the train call's steps at most (1: it never loops)
    traces: Counter[str]
    step: int  # the position and the run directory, for a backend's error messages
    model_dir: Path


class RunnerView(Protocol):
    """What a callback may read, and change through the methods, at any hook point.

    Read at every point: the position (`step`, `epoch`, `mode`, `inner_step` of
    `phase_steps`), the settings (`pipeline`, `workflow`, `by_epoch`, `max_epochs`,
    `max_iters`, batch sizes, `steps_per_epoch`), `model`, `optimizer`, `placement`.
    After an iter: `outputs` (the last call's values) and `iter_seconds`; after a phase:
    `phase_outputs` (its averaged values) and `phase_recorded_before` (a resumed run ran
    again a phase it had recorded, to the same values: a writer of records leaves it out).
    `should_stop` / `failed` say a stop is asked.
    A callback changes the run only by `request_stop`, `fail` and `save_checkpoint`.
    """

    pipeline: Pipeline
    model_dir: Path
    model: Model
    optimizer: Optimizer
    placement: Placement
    workflow: list[tuple[str, int]]
    by_epoch: bool
    max_epochs: int | None
    max_iters: int | None
    batch_size: int  # this replica's
    global_batch_size: int
    scaling: Scaling  # batch and learning-rate factor at this world size
    batch_norm_sync: BatchNormSync | None  # whether batch norm is synchronised at this world size
    modeler: Modeler
    steps_per_epoch: int
    mode: str
    step: int
    epoch: int
    inner_step: int
    phase_steps: int | None
    outputs: dict[str, float]
    phase_outputs: dict[str, float]
    phase_recorded_before: bool
    iter_seconds: float
    resumed: bool

    @property
    def should_stop(self) -> bool: ...
    @property
    def failed(self) -> bool: ...

    def request_stop(self, reason: str) -> None: ...
    def fail(self, reason: str) -> None: ...
    def save_checkpoint(self) -> str | None: ...
    def summary_writer(self, mode: str) -> Any: ...
    def train_graph_def(self) -> Any: ...
    def log_metrics(self, mode: str, values: dict[str, Any]) -> None: ...
    def print(self, message: str) -> None: ...
    def notice(self, message: str) -> None: ...


class ReplicaStateView(Protocol):
    """The replicas' batch-norm statistics (dsl.engine.replicas.ReplicaState)."""

    def average(self) -> None: ...


class ElasticRunner(RunnerView, Protocol):
    """What an elastic backend needs beyond a callback's view: to save and move the position."""

    @property
    def replica_state(self) -> ReplicaStateView: ...  # averaged before a commit

    # A dsl.engine.hooks.Callback: named by Any, as callbacks import this module for RunnerView.
    def add_callback(self, callback: Any) -> None: ...
    def state_variables(self) -> list[Variable]: ...
    def position(self) -> dict[str, int]: ...
    def enter_world(self, step: int, epoch: int, epoch_examples: int) -> None: ...


class Evaluator(RunnerView, Protocol):
    """What a task that only evaluates checkpoints (a ps cluster's evaluator, `eval --watch`) needs."""

    def watch(self) -> int: ...


class Topology(Protocol):
    """Where this process sits and how the data is split: what the data feed and the scaling ask."""

    name: str
    placement: Placement

    @property
    def num_shards(self) -> Any: ...
    @property
    def shard_index(self) -> Any: ...

    def replicas_in_step(self) -> int: ...
    def asynchronous_workers(self) -> int: ...
    def describe(self) -> str: ...


class StepPlacement(Protocol):
    """How the one step is placed: variables created in `scope`, the step calls built from the
    engine's parts (reducing gradients through `wrap_tape`, or a strategy's own call)."""

    def setup(self) -> None: ...
    def scope(self) -> AbstractContextManager[Any]: ...
    def prepare_model(self, model: Model, batch_norm: BatchNormSync) -> Model: ...
    def make_train_call(self, parts: StepParts) -> StepCall: ...
    def make_val_call(self, parts: StepParts) -> StepCall: ...
    def make_reconcile_call(self, parts: StepParts) -> ReconcileCall | None: ...
    def make_iterator(self, dataset_fn: Callable[[], Dataset]) -> Iterator[Any] | Any: ...
    def trains(self) -> bool: ...
    def wrap_tape(self, tape: Tape) -> Tape: ...


class Communication(Protocol):
    """How the ranks start from the same weights and agree: the collectives outside the step."""

    def broadcast(self, variables: list[Variable]) -> None: ...
    def average_across_replicas(self, tensors: list[Tensor]) -> list[Tensor]: ...
    def sum_across_ranks(self, arrays: list[Any]) -> list[Any]: ...
    def gather_objects(self, value: Any) -> list[Any]: ...
    def max_across_ranks(self, value: int) -> int: ...
    def gather_strings(self, value: str) -> list[str]: ...


class Orchestration(Protocol):
    """How the job runs around the loop: elastic training, a task that does not train (a parameter
    server, an evaluator), and the end."""

    def run_training(self, runner: ElasticRunner, train: Callable[[], None]) -> None: ...
    def run_task(self, runner: Evaluator) -> int | None: ...
    def shutdown(self) -> None: ...


class Backend(Topology, StepPlacement, Communication, Orchestration, Protocol):
    """Placement and communication, nothing else: the loop never branches on a backend's name.

    Four responsibilities, each its own Protocol, so that a part of the engine asks for the one
    it uses (the stop agreement and the metric reduction only communicate, the data feed only
    needs the topology): `Topology` (where this process sits, how the data splits),
    `StepPlacement` (how the step is placed and gradients reduced), `Communication` (broadcast,
    sums, gathers, the maximum the ranks agree on) and `Orchestration` (elastic runs, tasks that
    do not train, shutdown).
    """
