"""This rank's data for the loop: the train data of an epoch from a position, its eval share.

Each epoch's order is derived from (seed, epoch), so a position inside it is a count of
batches to skip instead of a saved shuffle buffer (resume), and every rank reads its own
shard, cut before shuffling (the inputter's contract).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from dsl.engine.contracts import Augmenter, Backend, Dataset, ExampleTransform, Inputter, Tensor
from dsl.errors import DslError


class DataFeed:
    """The inputter and augmenter as the backend shards them, for one process."""

    def __init__(self, inputter: Inputter, augmenter: Augmenter, backend: Backend, batch_size: int, seed: int) -> None:
        self.inputter = inputter
        self.augmenter = augmenter
        self.backend = backend
        self.batch_size = batch_size
        self.seed = seed
        self._builder: ThreadPoolExecutor | None = None
        self._ahead: tuple[tuple[int, int, Any, Any], Future[Any]] | None = None

    def train_iterator(self, epoch: int, skip: int) -> Any:
        """This rank's train iterator of `epoch` after `skip` batches; the next epoch's is built
        meanwhile, in a thread, while this one trains.

        A new epoch's pipeline is a new `tf.data` graph (its order comes from (seed, epoch)):
        tracing its map functions and making its iterator cost ~300 ms, which the step would
        otherwise wait for at every epoch boundary (docs/benchmarks.md, P6). The iterator
        built ahead is used only if it is the one asked for (same epoch, start and shards:
        an elastic resize or a resume asks for another), so the data stay exactly the same.
        """
        key = (epoch, skip, self.backend.num_shards, self.backend.shard_index)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == key:
            iterator = ahead[1].result()  # a data error of the next epoch is raised here, when it starts
        else:
            iterator = self.backend.make_iterator(self.train(epoch, skip))
        if self._builder is None:
            self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dslrun-next-epoch")
        following = (epoch + 1, 0, self.backend.num_shards, self.backend.shard_index)
        self._ahead = (following, self._builder.submit(self.backend.make_iterator, self.train(epoch + 1, 0)))
        return iterator

    def train(self, epoch: int, skip: int) -> Callable[[], Dataset]:
        """Builds this rank's train data of `epoch`, positioned after `skip` batches (resume)."""

        def dataset_fn() -> Dataset:
            seed = (self.seed * 1_000_003 + epoch * 7_919) % (2**31 - 1)
            dataset = self.inputter.dataset(
                "train", self.augmenter.train, self.backend.num_shards, self.backend.shard_index, seed=seed
            )
            return dataset.skip(skip) if skip else dataset

        return dataset_fn

    def eval_iterator(self, mode: str) -> Any:
        """An iterator over this rank's share of `mode`'s data, without augmentation."""
        return self.backend.make_iterator(lambda: self.inputter.dataset(
            mode, eval_transform(self.augmenter), self.backend.num_shards, self.backend.shard_index, seed=self.seed
        ))

    def eval_share(self, mode: str, max_steps: int | None) -> tuple[int, int]:
        """This rank's eval batches and the examples they hold (`max_steps` may cut both)."""
        total = self.inputter.num_examples(mode)
        world, rank = self.backend.num_shards, self.backend.shard_index
        mine: int = (total - rank + world - 1) // world  # examples of this rank's shard
        steps = -(-mine // self.batch_size)
        if max_steps:
            steps = min(steps, max_steps)
        return steps, min(mine, steps * self.batch_size)

    def check(self, steps_per_epoch: int, world_size: int) -> None:
        """At least one full batch per epoch on every rank."""
        if not self.inputter.has_source("train"):
            raise DslError("the inputter has no train data; set inputter.train")
        if not steps_per_epoch:
            examples = self.inputter.num_examples("train")
            raise DslError(
                f"inputter.batch_size {self.batch_size} x {world_size} process(es) is larger "
                f"than the train data ({examples} examples): not one full batch per epoch; lower "
                "inputter.batch_size or set inputter.drop_remainder: false"
            )


def eval_transform(augmenter: Augmenter) -> ExampleTransform:
    """The augmenter's deterministic `eval` as an example transform: features changed, targets kept.

    Carries the augmenter's `changes_data`, so an inputter can still leave out a map that
    would change nothing.
    """

    def transform(features: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        return augmenter.eval(features), targets

    transform.changes_data = getattr(augmenter, "changes_data", True)  # type: ignore[attr-defined]
    return transform


def eval_preprocess(augmenter: Augmenter) -> Callable[[Tensor], Tensor] | None:
    """The augmenter's `eval` for predict and serving, or None when it changes nothing."""
    return augmenter.eval if getattr(augmenter, "changes_data", True) else None


def explain_failure(exc: Any, mode: str, step: int) -> DslError:
    """A TensorFlow runtime error as one line: which file (the inputter knows) or which step."""
    from dsl.inputters._pipeline import explain_data_error

    explained: DslError | None = explain_data_error(exc)
    if explained is not None:
        return explained
    message = (exc.message or str(exc)).strip().splitlines()[0]
    return DslError(f"TensorFlow failed in the {mode} phase at step {step}: {message}")
