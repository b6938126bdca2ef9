"""This rank's data for the loop: one stream of train batches across epochs, its eval share.

Each epoch's order is derived from (seed, epoch), so a position inside it is a count of
batches to skip instead of a saved shuffle buffer (resume), and every rank reads its own
shard, cut before shuffling (the inputter's contract).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsl.engine.contracts import Augmenter, Backend, Dataset, ExampleTransform, Inputter, Tensor
from dsl.language.errors import DslError, clean_error


def epoch_seed(seed: Any, epoch: Any) -> Any:
    """The seed of one epoch's order and augmentation: a Python int for an int epoch, an
    int64 tensor for a tensor one (the same value either way)."""
    return (seed * 1_000_003 + epoch * 7_919) % (2**31 - 1)


def built_as_if_eager(build: Callable[..., Dataset]) -> Callable[..., Dataset]:
    """`build` (a `flat_map` function that builds a dataset) run with AutoGraph as where an eval
    dataset is built, outside any function: the inputter's Python, which only builds a pipeline,
    runs as written, and each function it maps is converted.

    Inside `flat_map`, AutoGraph converted the inputter's whole Python (every module outside
    TensorFlow's own) to build what runs the same unconverted: half of AutoGraph's time at a
    process's start (docs/benchmarks.md, P5). So `build` is marked not to be converted, and the
    status a map's function is converted under, which that marking sets to "disabled", is put
    back. TensorFlow has no public API for that status: without the module that holds it,
    `build` is returned as it was, converted as before.
    """
    try:
        import tensorflow as tf
        from tensorflow.python.autograph.core import ag_ctx
    except ImportError:  # pragma: no cover - a TensorFlow that moved it
        return build

    @functools.wraps(build)
    def as_if_eager(*args: Any) -> Dataset:
        with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.UNSPECIFIED):
            return build(*args)

    return tf.autograph.experimental.do_not_convert(as_if_eager)  # type: ignore[no-any-return]


def takes_skip(inputter: Inputter) -> bool:
    """Whether the inputter's `dataset` can leave out the first batches of an epoch itself."""
    import inspect

    try:
        return "skip" in inspect.signature(inputter.dataset).parameters
    except (TypeError, ValueError):
        return False


class DataFeed:
    """The inputter and augmenter as the backend shards them, for one process."""

    def __init__(self, inputter: Inputter, augmenter: Augmenter, backend: Backend, batch_size: int, seed: int) -> None:
        self.inputter = inputter
        self.augmenter = augmenter
        self.backend = backend
        self.batch_size = batch_size
        self.seed = seed

    def train_iterator(self, epoch: int, skip: int, steps_per_epoch: int) -> Any:
        """This rank's train batches from batch `skip` of `epoch` on, through every later epoch."""
        return self.backend.make_iterator(self.train(epoch, skip, steps_per_epoch))

    def train(self, epoch: int, skip: int, steps_per_epoch: int) -> Callable[[], Dataset]:
        """Builds this rank's train data from batch `skip` of `epoch` on: one dataset whose
        epochs follow each other, each exactly `steps_per_epoch` batches.

        One dataset rather than one per epoch, so that nothing is built at an epoch boundary
        and the prefetch at its end runs through it: the next epoch's shuffle buffer fills
        while this one trains (a new pipeline per epoch cost every boundary a re-trace, a new
        iterator and buffers filled from empty: docs/benchmarks.md, P6). The epoch reaches
        the inputter as an int64 tensor seed; each epoch's batches are those the inputter
        gives for that epoch's seed (tests/test_data_feed.py). Each epoch is cut to
        `steps_per_epoch` because a rank whose shard holds one example more than another's
        can have one batch more, which must not run into the next epoch.

        `skip` batches of the first epoch are left out by the inputter itself when its `dataset`
        takes `skip` (as raw examples, before decoding: dsl.inputters.pipeline.BaseInputter);
        otherwise the batches are made and dropped here.
        """
        inputter_skips = bool(skip) and takes_skip(self.inputter)

        def dataset_fn() -> Dataset:
            import tensorflow as tf

            @built_as_if_eager
            def one_epoch(number: Any) -> Dataset:
                options: dict[str, Any] = {}
                steps: Any = steps_per_epoch
                if inputter_skips:  # the first epoch starts `skip` batches in
                    options["skip"] = tf.cast(tf.equal(number, epoch), tf.int64) * skip
                    steps = tf.maximum(steps_per_epoch - options["skip"], 0)
                return self.inputter.dataset(
                    "train", self.augmenter.train, self.backend.num_shards, self.backend.shard_index,
                    seed=epoch_seed(self.seed, number), batch_size=self.batch_size, **options,
                ).take(steps)

            dataset = tf.data.Dataset.counter(epoch).flat_map(one_epoch)
            dataset = dataset.skip(skip) if skip and not inputter_skips else dataset
            return dataset.prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    def eval_iterator(self, mode: str) -> Any:
        """An iterator over this rank's share of `mode`'s data, without augmentation."""
        return self.backend.make_iterator(lambda: self.inputter.dataset(
            mode, eval_transform(self.augmenter), self.backend.num_shards, self.backend.shard_index, seed=self.seed,
            batch_size=self.batch_size,
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
                f"a batch of {self.batch_size} x {world_size} process(es) is larger "
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


def explain_failure(exc: Any, inputter: Inputter, mode: str, step: int) -> DslError:
    """A TensorFlow runtime error as one line: which file (the inputter knows) or which step."""
    explained = inputter.explain_error(exc)
    if explained is not None:
        return explained
    message = clean_error(exc.message or str(exc))  # the line saying what, not "Graph execution error:"
    return DslError(f"TensorFlow failed in the {mode} phase at step {step}: {message}")
