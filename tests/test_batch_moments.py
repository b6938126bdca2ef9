"""The global batch's mean and variance from every rank's own (dsl/distributed/batch_moments.py),
the statistics synchronised batch norm normalises with under Horovod.

Ranks are stood in for by shares of one array whose `local_moments` are concatenated, which is
what the allgather does; tests/test_horovod.py runs the layer on two real ranks.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from dsl.distributed.batch_moments import combine, local_moments

AXES = [0, 1, 2]  # a conv layer's batch-norm axes: examples, rows, columns


def synced(*shares: np.ndarray, keep_dims: bool = False) -> tuple[np.ndarray, np.ndarray]:
    gathered = tf.concat([local_moments(tf.constant(share), AXES) for share in shares], 0)
    mean, variance = combine(gathered, AXES, keep_dims)
    return mean.numpy(), variance.numpy()


def reference(*shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    whole = np.concatenate(shares).astype(np.float64)
    return whole.mean(axis=tuple(AXES)), whole.var(axis=tuple(AXES))


def test_uneven_shares_give_the_statistics_of_the_whole_batch() -> None:
    """7 examples on one rank and 1 on the other (the last batch of an epoch with
    `drop_remainder: false`): the statistics of all 8, where weighing the two ranks equally, as
    Horovod's SyncBatchNormalization does, is far off."""
    rng = np.random.default_rng(0)
    big = rng.normal(0.0, 1.0, (7, 4, 4, 3)).astype(np.float32)
    one = rng.normal(3.0, 1.0, (1, 4, 4, 3)).astype(np.float32)
    mean, variance = synced(big, one)
    want_mean, want_variance = reference(big, one)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variance, want_variance, rtol=1e-5)
    equal_weights = (big.mean(axis=(0, 1, 2)) + one.mean(axis=(0, 1, 2))) / 2
    assert np.min(np.abs(equal_weights - want_mean)) > 0.5


def test_a_large_mean_keeps_the_variance_and_it_is_never_negative() -> None:
    """A channel at 1000 with spread 0.05: E[x^2] - E[x]^2 over the whole batch in float32
    loses the variance to cancellation (off by far more than itself here); summing each rank's
    variance and the spread of the ranks' means keeps it."""
    rng = np.random.default_rng(1)
    shares = [(1000.0 + rng.normal(0.0, 0.05, (8, 4, 4, 2))).astype(np.float32) for _ in range(2)]
    mean, variance = synced(*shares)
    want_mean, want_variance = reference(*shares)
    np.testing.assert_allclose(variance, want_variance, rtol=1e-2)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)
    whole = tf.constant(np.concatenate(shares))
    naive = (tf.reduce_mean(tf.square(whole), AXES) - tf.square(tf.reduce_mean(whole, AXES))).numpy()
    assert np.max(np.abs(naive - want_variance)) > 10 * np.max(want_variance)


def test_a_share_with_no_examples_adds_nothing() -> None:
    rng = np.random.default_rng(2)
    share = rng.normal(1.0, 2.0, (5, 3, 3, 4)).astype(np.float32)
    empty = np.zeros((0, 3, 3, 4), np.float32)
    mean, variance = synced(share, empty)
    want_mean, want_variance = reference(share)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variance, want_variance, rtol=1e-5)
    assert np.isfinite(mean).all() and np.isfinite(variance).all()


def test_keep_dims_and_half_precision_inputs() -> None:
    rng = np.random.default_rng(3)
    share = rng.normal(0.5, 1.0, (4, 2, 2, 3)).astype(np.float16)
    moments = local_moments(tf.constant(share), AXES)
    assert moments.dtype == tf.float32  # computed in float32, as Keras does for fp16
    mean, variance = combine(moments, AXES, keep_dims=True, dtype=tf.float16)
    assert mean.shape == variance.shape == (1, 1, 1, 3) and mean.dtype == tf.float16
    np.testing.assert_allclose(variance.numpy().ravel(), reference(share)[1], rtol=1e-2)


def test_a_mask_weights_the_examples() -> None:
    """Keras passes batch norm a per-step mask for padded sequences: masked steps count for nothing."""
    rng = np.random.default_rng(4)
    steps = rng.normal(0.0, 1.0, (2, 5, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
    mean, variance = combine(local_moments(tf.constant(steps), [0, 1], tf.constant(mask)), [0, 1], keep_dims=False)
    kept = steps[mask].astype(np.float64)
    np.testing.assert_allclose(mean.numpy(), kept.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variance.numpy(), kept.var(axis=0), rtol=1e-5)


def test_gradients_through_shares_are_those_of_the_whole_batch() -> None:
    """What the train step differentiates: normalising each share with the synchronised
    statistics gives every example the gradient it gets when one process normalises the whole
    batch (the allgather's gradient sums the ranks' gradients, as the concatenation here does)."""
    rng = np.random.default_rng(5)
    first = tf.constant(rng.normal(0.0, 1.0, (6, 3, 3, 2)).astype(np.float32))
    second = tf.constant(rng.normal(0.5, 2.0, (2, 3, 3, 2)).astype(np.float32))
    weights = tf.constant(rng.normal(0.0, 1.0, (8, 3, 3, 2)).astype(np.float32))

    def loss(normalised: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.sin(normalised) * weights)

    with tf.GradientTape() as tape:
        tape.watch([first, second])
        gathered = tf.concat([local_moments(first, AXES), local_moments(second, AXES)], 0)
        mean, variance = combine(gathered, AXES, keep_dims=True)
        shares = tf.concat([first, second], 0)
        split = loss((shares - mean) * tf.math.rsqrt(variance + 1e-3))
    got = tf.concat(tape.gradient(split, [first, second]), 0)

    whole = tf.concat([first, second], 0)
    with tf.GradientTape() as tape:
        tape.watch(whole)
        mean, variance = tf.nn.moments(whole, AXES, keepdims=True)
        one = loss((whole - mean) * tf.math.rsqrt(variance + 1e-3))
    want = tape.gradient(one, whole)
    np.testing.assert_allclose(split.numpy(), one.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    assert float(tf.reduce_max(tf.abs(want))) > 1e-2
