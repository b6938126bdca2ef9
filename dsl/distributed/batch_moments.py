"""The mean and variance of a batch split across ranks, from every rank's own statistics.

Synchronised batch norm (backends/_sync_batch_norm.py) needs, in every training step and
every layer, the statistics of the global batch while each rank holds only its share. Each
rank computes its count n_i, mean m_i and variance v_i per channel (subtracting its mean
first, as tf.nn.moments does), the ranks gather them (one allgather of [1, 3, channels]), and
every rank combines them the same way:

    mean     = sum(n_i m_i) / N
    variance = sum(n_i v_i) / N  +  sum(n_i (m_i - mean)^2) / N

Each term is a sum of non-negative parts, so the variance keeps its digits and cannot be
negative. The shorter formulas lose them:

- Horovod's own SyncBatchNormalization averages the ranks' means and mean squares with equal
  weights, so a rank holding 1 example (the last batch of an epoch with `inputter.drop_remainder:
  false`) counts as much as one holding 64; and it takes mean(x^2) - mean^2, unclamped.
- Keras' `synchronized=True` all-reduces the sums of x and x^2 and takes E[x^2] - E[x]^2
  (clamped at 0), which weighs by count but cancels: a channel at 1000 with spread 0.05 has a
  float32 E[x]^2 whose last digit (0.06) is larger than its variance.

A rank with no examples adds nothing. Imports TensorFlow.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def local_moments(inputs: tf.Tensor, axes: Any, mask: tf.Tensor | None = None) -> tf.Tensor:
    """This rank's [[count, mean, variance]] per channel: shape [1, 3, ...] with the reduced axes
    kept as 1, ready to be gathered along the first axis. `mask` (Keras' per-step mask, as
    `BatchNormalization._moments` takes it) weights the examples."""
    x = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 else inputs
    weights = None if mask is None else tf.broadcast_to(tf.expand_dims(tf.cast(mask, x.dtype), -1), tf.shape(x))
    total = tf.reduce_sum(x if weights is None else weights * x, axis=axes, keepdims=True)
    if weights is None:  # every example counts: no weights to multiply through the activations
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype) * tf.ones_like(total)
    else:
        count = tf.reduce_sum(weights, axis=axes, keepdims=True)
    # As tf.nn.weighted_moments, dividing with divide_no_nan: a share with no examples gives
    # zeros (and zero gradients), which its count of 0 then weighs by nothing.
    mean = tf.math.divide_no_nan(total, count)
    deviations = tf.math.squared_difference(x, tf.stop_gradient(mean))
    if weights is not None:
        deviations = weights * deviations
    variance = tf.math.divide_no_nan(tf.reduce_sum(deviations, axis=axes, keepdims=True), count)
    return tf.expand_dims(tf.stack([count, mean, variance]), 0)


def combine(gathered: tf.Tensor, axes: Any, keep_dims: bool,
            dtype: tf.DType | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """The global batch's (mean, variance) from every rank's `local_moments` concatenated on the
    first axis; without the reduced `axes` unless `keep_dims`, and cast to `dtype` (the inputs'
    dtype) when given."""
    counts, means, variances = tf.unstack(gathered, axis=1)
    total = tf.reduce_sum(counts, axis=0)
    mean = tf.math.divide_no_nan(tf.reduce_sum(counts * means, axis=0), total)
    spread = counts * (variances + tf.math.squared_difference(means, mean))
    variance = tf.math.divide_no_nan(tf.reduce_sum(spread, axis=0), total)
    if not keep_dims:
        mean, variance = tf.squeeze(mean, axis=list(axes)), tf.squeeze(variance, axis=list(axes))
    if dtype is not None and dtype != mean.dtype:
        mean, variance = tf.cast(mean, dtype), tf.cast(variance, dtype)
    return mean, variance
