"""dsl.engine.global_batch: a loss divided by a count over its batch, split over replicas,
has the one-process gradient once each replica divides by the global count / replicas."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from dsl.engine.global_batch import Replicas, count_normaliser, sharing


def test_alone_the_count_is_this_batch_s_and_never_below_one() -> None:
    assert float(count_normaliser(tf.constant(3.0))) == 3.0
    assert float(count_normaliser(tf.constant(0.0))) == 1.0
    with sharing(Replicas(lambda tensors: [tensors[0] * 0 + 100.0], 1)):  # one replica: nothing to share
        assert float(count_normaliser(tf.constant(3.0))) == 3.0


@pytest.mark.parametrize("counts", [(3.0, 9.0), (0.0, 2.0), (0.0, 0.0)])
def test_the_replicas_mean_gradient_is_the_one_process_gradient(counts: tuple[float, float]) -> None:
    """Two replicas, each summing a loss over its half and dividing by `count_normaliser` of its
    own count (the other's count reaches it through the mean, as an all-reduce would bring it):
    their mean gradient equals the gradient of the whole sum / max(whole count, 1). Dividing
    by each replica's own count does not (checked, where the counts differ)."""
    weight = tf.Variable([0.5, -1.5])
    halves = [tf.constant([[1.0, 2.0], [3.0, -1.0]]), tf.constant([[0.5, 0.5], [-2.0, 4.0], [1.0, 1.0]])]

    def summed(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.square(tf.linalg.matvec(x, weight)))

    def gradient(loss_of: object) -> np.ndarray:
        with tf.GradientTape() as tape:
            loss = loss_of()
        return tape.gradient(loss, weight).numpy()

    whole = gradient(lambda: summed(tf.concat(halves, 0)) / max(sum(counts), 1.0))
    shared, own = [], []
    for index, (half, count) in enumerate(zip(halves, counts)):
        other = counts[1 - index]
        with sharing(Replicas(lambda tensors, other=other: [(tensors[0] + other) / 2], 2)):
            shared.append(gradient(lambda half=half, count=count: summed(half) / count_normaliser(tf.constant(count))))
        own.append(gradient(lambda half=half, count=count: summed(half) / count_normaliser(tf.constant(count))))
    np.testing.assert_allclose(np.mean(shared, axis=0), whole, rtol=1e-6)
    if counts[0] != counts[1] and min(counts) > 0:
        assert not np.allclose(np.mean(own, axis=0), whole, rtol=1e-2)
