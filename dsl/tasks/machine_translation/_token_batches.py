"""Train batches sized in tokens (`inputter.batch_tokens`): pairs of similar length batched together.

Padding every batch to `max_length` wastes most of a step on short sentences; translation
toolkits (fairseq's `--max-tokens`, OpenNMT's `batch_type: tokens`) fill each batch with about the
same number of tokens instead, grouping pairs of similar length. Here a pair's length is its longer
side with `<s>`/`</s>`; the pairs fall in length buckets (multiples of 8 up to `max_length + 1`),
each bucket padded to its bound and batched `budget // bound` pairs at a time.

Every rank must run the same number of steps per epoch (the engine assumes it, and an
allreduce waits for every rank), and a resumed epoch must replay the same batches. So each
bucket's pairs are sharded first (every rank takes the same count, the few left over wait for
the next epoch's shuffle), shuffled by the epoch's seed, batched; the buckets' batches are
interleaved in an order drawn from the same seed. The count of batches is known up front:
`steps(...)` is what the engine plans with.

The budget of a rank is `batch_tokens` scaled as the engine scales `batch_size` (divided by the
replicas under `runner.batch_scaling: none`, kept under `linear`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

BUCKET_STEP = 8  # bucket bounds are multiples of this many tokens
_SEED_STRIDE = 1_000_003  # one shuffle seed per bucket, and one for the order of the batches


@dataclass(frozen=True)
class Bucket:
    """The train pairs whose padded length is at most `bound` (and above the previous bucket's)."""

    bound: int
    rows: np.ndarray  # indices into the train arrays


def buckets(lengths: np.ndarray, padded_length: int) -> list[Bucket]:
    """The non-empty buckets of pairs of `lengths` (tokens of the longer side, <s>/</s> included)."""
    bounds = [*range(BUCKET_STEP, padded_length, BUCKET_STEP), padded_length]
    found, low = [], 0
    for bound in bounds:
        rows = np.flatnonzero((lengths > low) & (lengths <= bound))
        if rows.size:
            found.append(Bucket(bound, rows))
        low = bound
    return found


def pairs_per_batch(bucket: Bucket, budget: int) -> int:
    """Pairs of this bucket a batch of `budget` tokens holds (at least one)."""
    return max(1, budget // bucket.bound)


def batches_per_rank(bucket: Bucket, budget: int, world_size: int, drop_remainder: bool) -> int:
    """Batches of this bucket each of `world_size` ranks takes per epoch (the same on every rank)."""
    share = len(bucket.rows) // world_size
    size = pairs_per_batch(bucket, budget)
    return share // size if drop_remainder else math.ceil(share / size)


def steps(all_buckets: list[Bucket], budget: int, world_size: int, drop_remainder: bool) -> int:
    """Train steps per epoch on every rank."""
    return sum(batches_per_rank(bucket, budget, world_size, drop_remainder) for bucket in all_buckets)


def describe(all_buckets: list[Bucket], budget: int, world_size: int, batch_tokens: int) -> str:
    """What the global batch became, for the run's log."""
    sizes = ", ".join(f"{pairs_per_batch(b, budget)} pairs of <= {b.bound}" for b in all_buckets)
    ranks = f" = {world_size} x {budget} tokens" if world_size > 1 else ""
    return (f"inputter.batch_tokens {batch_tokens}: about {budget * world_size} tokens per global batch{ranks}; "
            f"per rank, batches of {sizes} tokens")


def dataset(arrays: tuple[dict[str, np.ndarray], np.ndarray], all_buckets: list[Bucket], budget: int,
            num_shards: Any, shard_index: Any, seed: Any, drop_remainder: bool) -> Any:
    """One epoch of this rank's token-sized train batches ({"source", "target"}, targets), in an order of `seed`."""
    import tensorflow as tf

    from dsl.inputters.pipeline import slices

    features, targets = arrays
    parts, choices = [], []
    seed = tf.cast(seed if seed is not None else 0, tf.int64)
    for number, bucket in enumerate(all_buckets):
        bound, rows = bucket.bound, bucket.rows
        sliced = ({name: values[rows, :bound] for name, values in features.items()}, targets[rows, :bound])
        share = len(rows) // num_shards
        data = slices(sliced).shard(num_shards, shard_index)
        data = data.shuffle(len(rows), seed=seed * _SEED_STRIDE + number + shard_index * 7919,
                            reshuffle_each_iteration=True).take(share)
        parts.append(data.batch(pairs_per_batch(bucket, budget), drop_remainder=drop_remainder))
        choices.append(tf.fill([batches_of(share, pairs_per_batch(bucket, budget), drop_remainder)], tf.cast(number, tf.int64)))
    order = tf.data.Dataset.from_tensor_slices(tf.concat(choices, axis=0))
    order = order.shuffle(max(1, sum(len(b.rows) for b in all_buckets)), seed=seed * _SEED_STRIDE + len(all_buckets),
                          reshuffle_each_iteration=True)
    return tf.data.Dataset.choose_from_datasets(parts, order, stop_on_empty_dataset=False)


def batches_of(share: Any, size: int, drop_remainder: bool) -> Any:
    """Batches `share` pairs make (an int, or a tensor when the share is one)."""
    return share // size if drop_remainder else -(-share // size)
