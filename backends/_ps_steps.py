"""The train calls of the parameter-server backend, around the one shared train step.

Imports TensorFlow: import this module only from inside functions of backends/ps.py.

The step is dsl.engine.steps.make_step, as every backend's (`replica_step` runs it in a
tf.distribute replica context); the two modes differ in who calls it: `CentralStorageTrainCall` runs k steps per graph call on the local devices, and
`ClusterTrainCall` schedules them on the workers of a cluster through the coordinator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import tensorflow as tf

from dsl.engine.contracts import StepCall, StepParts
from dsl.engine.steps import make_step


class ClusterBackend(Protocol):
    """What the cluster train call uses of backends.ps.ParameterServerBackend (which imports this module)."""

    coordinator: Any
    strategy: Any

    @property
    def num_workers(self) -> int: ...
    def per_worker_dataset_fn(self, dataset_fn: Callable[[], Any]) -> Callable[[], Any]: ...


class DeferredData:
    """The runner's dataset function, turned into an iterator by the call that consumes it.

    Train data goes to the replicas (or to every worker of a cluster), val data stays in this
    process; only the call receiving the data knows which, so `make_iterator` defers.
    """

    def __init__(self, dataset_fn: Callable[[], tf.data.Dataset]) -> None:
        self.dataset_fn = dataset_fn
        self._made: dict[str, Any] = {}

    def get(self, kind: str, make: Callable[[Callable[[], tf.data.Dataset]], Any]) -> Any:
        if kind not in self._made:
            self._made[kind] = make(self.dataset_fn)
        return self._made[kind]


def replica_step(runner: StepParts, strategy: tf.distribute.Strategy) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """The shared train step (dsl.engine.steps.make_step) as one replica of `strategy` runs it:
    the optimizer sums the replicas' gradients, so each differentiates loss / replicas, and
    loss scaling and `jit_compile` work as on every other backend."""
    return make_step(runner.model, runner.modeler, runner.optimizer, runner.metrics["train"],
                     num_replicas=strategy.num_replicas_in_sync, jit_gradients=runner.jit_compile)


def _outputs(runner: StepParts, mean_loss: Any) -> dict[str, Any]:
    outputs = {"loss": mean_loss}
    outputs.update({name: metric.result() for name, metric in runner.metrics["train"].items() if name != "loss"})
    outputs["learning_rate"] = tf.cast(runner.optimizer.learning_rate, tf.float32)
    return outputs


class CentralStorageTrainCall:
    """`train_call(data, num_steps)` for CentralStorageStrategy: k steps in one graph call."""

    def __init__(self, runner: StepParts, strategy: tf.distribute.Strategy, traces: Counter[str]) -> None:
        self.strategy = strategy
        step = replica_step(runner, strategy)

        @tf.function
        def train_call(iterator: Any, num_steps: tf.Tensor) -> tf.Tensor:
            traces["train"] += 1  # runs at tracing time only
            total = tf.constant(0.0, tf.float32)
            for _ in tf.range(num_steps):
                features, targets = next(iterator)
                losses = strategy.run(step, args=(features, targets))
                total += strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
            return total / tf.cast(num_steps, tf.float32)

        self._call = train_call
        self._runner = runner

    def _iterator(self, data: DeferredData) -> Any:
        return data.get("replicas", lambda fn: iter(self.strategy.distribute_datasets_from_function(lambda _: fn())))

    def __call__(self, data: DeferredData, num_steps: tf.Tensor) -> dict[str, Any]:
        return _outputs(self._runner, self._call(self._iterator(data), num_steps))

    def get_concrete_function(self, data: DeferredData, num_steps: tf.Tensor) -> Any:
        """The traced graph (for TensorBoard's Graphs tab)."""
        return self._call.get_concrete_function(self._iterator(data), num_steps)


class ClusterTrainCall:
    """`train_call(data, num_steps)` for a parameter-server cluster.

    The steps of one call are split into one scheduled function per worker (so every worker
    computes), each running its share of steps in one graph call; `coordinator.join()` then
    waits for them, and the metrics are read from the ps tasks.
    """

    def __init__(self, runner: StepParts, backend: ClusterBackend, traces: Counter[str]) -> None:
        self.backend = backend
        self.coordinator = backend.coordinator
        strategy = backend.strategy
        step = replica_step(runner, strategy)

        @tf.function
        def worker_call(iterator: Any, num_steps: tf.Tensor) -> tf.Tensor:
            traces["train"] += 1
            total = tf.constant(0.0, tf.float32)
            for _ in tf.range(num_steps):
                features, targets = next(iterator)
                losses = strategy.run(step, args=(features, targets))
                total += strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
            return total

        self._call = worker_call
        self._runner = runner

    def _iterator(self, data: DeferredData) -> Any:
        return data.get("workers", lambda fn: iter(self.coordinator.create_per_worker_dataset(
            self.backend.per_worker_dataset_fn(fn))))

    def __call__(self, data: DeferredData, num_steps: tf.Tensor) -> dict[str, Any]:
        iterator = self._iterator(data)
        count = int(num_steps)
        shares = _split(count, self.backend.num_workers)
        results = [self.coordinator.schedule(self._call, args=(iterator, tf.constant(n, tf.int32))) for n in shares]
        self.coordinator.join()
        total = sum(float(result.fetch()) for result in results)
        return _outputs(self._runner, tf.constant(total / count, tf.float32))

    def get_concrete_function(self, data: DeferredData, num_steps: tf.Tensor) -> Any:
        """The graph a worker runs (for TensorBoard's Graphs tab)."""
        iterator = self._iterator(data)
        spec = iterator._values[0]._type_spec  # the per-worker iterator's type, as scheduled
        return self._call.get_concrete_function(spec, tf.TensorSpec([], tf.int32))


def _split(count: int, workers: int) -> list[int]:
    """`count` steps as near-equal shares, one per worker (fewer shares when count < workers)."""
    shares = min(count, max(1, workers))
    return [count // shares + (1 if i < count % shares else 0) for i in range(shares)]


def local_val_call(val_call: StepCall) -> StepCall:
    """The shared eval call, fed this process's own iterator over the val data."""

    def call(data: DeferredData, num_steps: tf.Tensor) -> dict[str, Any]:
        return val_call(data.get("local", lambda fn: iter(fn())), num_steps)

    return call
