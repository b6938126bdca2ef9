"""Metrics across ranks are computed from every rank's state, not averaged (dsl.engine.metric_reduction).

Two ranks are played in one process here: rank 0's metrics see one half of the data, rank 1's
the other, and the reducer gives rank 0 what Horovod's or the collective's sum and gather
would (rank 1's state is read from its metrics). The real backends are exercised by
tests/test_shipped_pipelines.py (2 Horovod ranks and 2 collective workers against `dslrun eval`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from dsl.engine.metric_reduction import reduced_results
from dsl.language.context import Placement
from dsl.language.errors import DslError
from dsl.tasks.image_segmentation._metrics import segmentation_metrics


class TwoRanks:
    """Rank 0's reducer in a world of two: the other rank's state is that of `other`'s metrics."""

    placement = Placement(rank=0, world_size=2)

    def __init__(self, other: dict[str, Any]) -> None:
        self.other = other

    def sum_across_ranks(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        theirs = [v.numpy() for m in self.other.values() for v in m.variables]
        assert len(theirs) == len(arrays)
        return [mine + other.astype(np.float64) for mine, other in zip(arrays, theirs)]

    def gather_objects(self, value: Any) -> list[Any]:
        other = next(m for m in self.other.values() if getattr(m, "reduction_across_ranks", "") == "gather")
        return [value, other.local_results()]


def segmentation(masks: np.ndarray, logits: np.ndarray) -> dict[str, Any]:
    metrics = segmentation_metrics(3, ignore_label=None)
    metrics["mean_iou"].update_state(masks, logits)
    return metrics


def test_mean_iou_of_two_ranks_is_that_of_their_summed_confusion_matrices() -> None:
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 3, size=(6, 4, 4))
    logits = rng.normal(size=(6, 4, 4, 3)).astype(np.float32)
    logits[:4] += np.eye(3, dtype=np.float32)[masks[:4]] * 2  # rank 0's half is mostly right, rank 1's not
    one_process = {name: float(m.result()) for name, m in segmentation(masks, logits).items()}
    rank0, rank1 = segmentation(masks[:4], logits[:4]), segmentation(masks[4:], logits[4:])
    own = {name: float(m.result()) for name, m in rank0.items()}

    reduced = reduced_results(rank0, TwoRanks(rank1))

    assert reduced == pytest.approx(one_process, abs=1e-7)
    averaged = (own["mean_iou"] * 4 + float(rank1["mean_iou"].result()) * 2) / 6
    assert abs(averaged - one_process["mean_iou"]) > 1e-2  # what the former weighted average reported
    # Rank 0 keeps its own counts: the next epoch (or a reader of its state) sees only its data.
    assert {name: float(m.result()) for name, m in rank0.items()} == own


def test_equal_counts_give_bit_equal_accuracy_whatever_the_split() -> None:
    """Two epochs with 410 of 595 right give one float, so save_best sees a tie, not a gain."""
    def accuracy_over(split: int) -> float:
        labels = np.array([i % 5 for i in range(595)])
        logits = np.full((595, 5), -1.0, np.float32)
        logits[np.arange(410), labels[:410]] = 1.0  # the first 410 right
        logits[np.arange(410, 595), (labels[410:] + 1) % 5] = 1.0
        halves = []
        for rows in (slice(0, split), slice(split, 595)):
            metric = tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")
            metric.update_state(labels[rows], logits[rows])
            halves.append({"accuracy": metric})
        return reduced_results(halves[0], TwoRanks(halves[1]))["accuracy"]

    assert accuracy_over(298) == accuracy_over(350) == accuracy_over(100) == np.float32(410 / 595)


class Median(tf.keras.metrics.Metric):
    """A value no sums give: the median of every example's score, gathered across ranks."""

    reduction_across_ranks = "gather"

    def __init__(self) -> None:
        super().__init__(name="median")
        self.scores: list[float] = []

    def update_state(self, scores: Any) -> None:
        self.scores += [float(s) for s in scores]

    def result(self) -> tf.Tensor:
        return tf.constant(float(np.median(self.scores)))

    def local_results(self) -> list[float]:
        return list(self.scores)

    def result_from(self, parts: list[list[float]]) -> float:
        return float(np.median([score for part in parts for score in part]))

    def reset_state(self) -> None:
        self.scores = []


def test_a_gathered_metric_is_computed_once_from_every_ranks_examples() -> None:
    rank0, rank1 = Median(), Median()
    rank0.update_state([1.0, 2.0, 3.0])
    rank1.update_state([10.0, 11.0])
    loss0, loss1 = tf.keras.metrics.Mean(name="loss"), tf.keras.metrics.Mean(name="loss")
    loss0.update_state([1.0, 3.0])
    loss1.update_state([5.0])
    reduced = reduced_results({"loss": loss0, "median": rank0}, TwoRanks({"loss": loss1, "median": rank1}))
    assert reduced == {"loss": pytest.approx(3.0), "median": 3.0}
    assert list(reduced) == ["loss", "median"]


def test_one_process_reads_its_results_without_communicating() -> None:
    metric = tf.keras.metrics.Mean(name="loss")
    metric.update_state([2.0, 4.0])

    class Silent:
        placement = Placement()

        def sum_across_ranks(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
            raise AssertionError("a single process must not communicate")

        def gather_objects(self, value: Any) -> list[Any]:
            raise AssertionError("a single process must not communicate")

    assert reduced_results({"loss": metric}, Silent()) == {"loss": 3.0}


def test_a_metric_declaring_an_unknown_reduction_is_named() -> None:
    metric = tf.keras.metrics.Mean(name="odd")
    metric.reduction_across_ranks = "average"  # type: ignore[attr-defined]
    with pytest.raises(DslError, match="metric 'odd' declares reduction_across_ranks 'average'"):
        reduced_results({"odd": metric}, TwoRanks({}))


def test_a_classifiers_per_class_report_of_two_ranks_is_that_of_one_process() -> None:
    """The report is made while the metrics hold both ranks' summed confusion matrix (while_summed)."""
    from dsl.engine.phase_report import PhaseReport
    from dsl.language.context import BuildContext
    from dsl.language.registry import lookup

    context = BuildContext(image_shape=(4, 4, 1), num_classes=3, class_names=["a", "b", "c"])
    classifier = lookup("modeler", "image_classification").builder({"type": "image_classification"}, context)
    rng = np.random.default_rng(1)
    labels, logits = rng.integers(0, 3, size=20), rng.normal(size=(20, 3)).astype(np.float32)

    def counted(rows: slice) -> dict[str, Any]:
        metrics = classifier.metrics("val")
        for metric in metrics.values():
            metric.update_state(labels[rows], logits[rows])
        return metrics

    alone, rank0, rank1 = counted(slice(0, 20)), counted(slice(0, 13)), counted(slice(13, 20))
    expected, own = PhaseReport(classifier), PhaseReport(classifier)
    expected.take(alone)
    own.take(rank0)
    report = PhaseReport(classifier)
    reduced = reduced_results(rank0, TwoRanks(rank1), lambda: report.take(rank0))

    assert report.last == expected.last and report.last != own.last
    assert report.outputs() == expected.outputs() and sum(v for k, v in report.outputs().items() if k.startswith("support_")) == 20
    assert reduced["macro_f1"] == pytest.approx(float(alone["macro_f1"].result()), abs=1e-7)
    assert classifier.report(rank0) == own.last  # rank 0 keeps its own counts afterwards
