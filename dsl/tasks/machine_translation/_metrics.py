"""The translation metrics: corpus BLEU and chrF over every rank's hypotheses, token accuracy, perplexity.

Private and TensorFlow-importing. Corpus BLEU is no mean of per-batch (or per-rank) scores: its
n-gram counts and lengths are summed over the whole set before the geometric mean and the
brevity penalty. So `bleu` declares `reduction_across_ranks = "gather"` (dsl.engine.metric_reduction):
each rank keeps its val sentences' hypothesis and reference ids, the backend gathers them, and
`result_from(parts)` detokenises every sentence and scores them once with sacrebleu (13a
tokenisation, the field's reported BLEU), the same on every rank and the same as one process.
`chrf` is a view of the same evaluation. `token_accuracy` and `perplexity` are sums of the
teacher-forced predictions over the non-padding target tokens (exact across ranks by summing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from dsl.tasks.machine_translation._sentencepiece import Tokenizers

# A record: one sentence's hypothesis ids and reference ids (shifted SentencePiece ids, 0 = padding).
Record = tuple[np.ndarray, np.ndarray]


@tf.autograph.experimental.do_not_convert
def corpus_scores(records: list[Record], tokenizers: Tokenizers | None) -> tuple[float, float, list[str]]:
    """(BLEU, chrF, hypotheses) of `records`, detokenised; 0 without sentences or models (`validate --build`)."""
    import sacrebleu

    if not records or tokenizers is None:
        return 0.0, 0.0, []
    hypotheses = [tokenizers.decode("target", hypothesis) for hypothesis, _ in records]
    references = [tokenizers.decode("target", reference) for _, reference in records]
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
    return float(bleu), float(chrf), hypotheses


class CorpusBleu(tf.keras.metrics.Metric):
    """Corpus BLEU (0-100) over every sentence seen; owns the records `chrf` reads."""

    reduction_across_ranks = "gather"

    def __init__(self, tokenizers: Tokenizers | None) -> None:
        super().__init__(name="bleu")
        self.tokenizers = tokenizers
        self.records: list[Record] = []
        self.last = (0.0, 0.0)  # (bleu, chrf) of the last result_from, read by the view
        # Of the last score: this process's sentences, or after `result_from` every rank's in the data's
        # order; the modeler writes them (hypotheses_<mode>.txt).
        self.hypotheses: list[str] = []
        self._local: tuple[int, tuple[float, float]] | None = None

    def update_state(self, targets: Any, outputs: Any, sample_weight: Any = None) -> Any:
        return tf.numpy_function(self._add, [outputs["tokens"], targets], tf.int64, stateful=True)

    def _add(self, hypotheses: np.ndarray, references: np.ndarray) -> np.int64:
        for hypothesis, reference in zip(hypotheses, references):
            self.records.append((hypothesis[hypothesis > 0].copy(), reference[reference > 0].copy()))
        return np.int64(len(self.records))

    def local_results(self) -> list[Record]:
        return list(self.records)

    def result_from(self, parts: list[list[Record]]) -> float:
        bleu, chrf, self.hypotheses = corpus_scores(in_file_order(parts), self.tokenizers)
        self.last = (bleu, chrf)
        return float(bleu)

    def local_scores(self) -> tuple[float, float]:
        """The scores of this process's records (cached until a record is added)."""
        if self._local is None or self._local[0] != len(self.records):
            bleu, chrf, self.hypotheses = corpus_scores(self.records, self.tokenizers)
            self._local = (len(self.records), (bleu, chrf))
        return self._local[1]

    def result(self) -> tf.Tensor:
        return tf.numpy_function(self._local_value, [], tf.float32, stateful=True)

    @tf.autograph.experimental.do_not_convert
    def _local_value(self) -> np.float32:
        return np.float32(self.local_scores()[0])

    def reset_state(self) -> None:
        self.records = []
        self._local = None


def in_file_order(parts: list[list[Record]]) -> list[Record]:
    """The ranks' records back in the order of the data: rank r evaluated examples r, r + N, r + 2N, ...
    of the unshuffled val split (its shard), so example i is part i % N's record i // N."""
    if len(parts) <= 1:
        return list(parts[0]) if parts else []
    total = sum(len(part) for part in parts)
    return [parts[index % len(parts)][index // len(parts)] for index in range(total)]


class CorpusChrf(tf.keras.metrics.Metric):
    """chrF (0-100) of the owner's evaluation."""

    reduction_across_ranks = "gather"

    def __init__(self, owner: CorpusBleu) -> None:
        super().__init__(name="chrf")
        self._owner = owner

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the owner keeps the records."""
        del args, kwargs

    def local_results(self) -> None:
        return None

    def result_from(self, parts: list[Any]) -> float:
        return float(self._owner.last[1])

    def result(self) -> tf.Tensor:
        return tf.numpy_function(self._local_value, [], tf.float32, stateful=True)

    @tf.autograph.experimental.do_not_convert
    def _local_value(self) -> np.float32:
        return np.float32(self._owner.local_scores()[1])

    def reset_state(self) -> None:
        return


class TokenSums(tf.keras.metrics.Metric):
    """A total and a count over the non-padding target tokens; `perplexity` = exp(total / count),
    else total / count. Sums only, so summing them across ranks is exact."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.total = self.add_weight(name="total", initializer="zeros", dtype=tf.float64)
        self.count = self.add_weight(name="count", initializer="zeros", dtype=tf.float64)

    def update_state(self, targets: Any, outputs: Any, sample_weight: Any = None) -> None:
        logits = tf.cast(outputs["logits"], tf.float32)
        real = tf.cast(tf.not_equal(targets, 0), tf.float32)
        if self.name == "perplexity":
            values = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
        else:
            values = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), targets), tf.float32)
        self.total.assign_add(tf.cast(tf.reduce_sum(values * real), tf.float64))
        self.count.assign_add(tf.cast(tf.reduce_sum(real), tf.float64))

    def result(self) -> tf.Tensor:
        mean = tf.math.divide_no_nan(self.total, self.count)
        return tf.cast(tf.exp(mean) if self.name == "perplexity" else mean, tf.float32)


def translation_metrics(tokenizers: Tokenizers | None) -> dict[str, tf.keras.metrics.Metric]:
    """{'token_accuracy', 'perplexity', 'bleu', 'chrf'}, updated with (targets, outputs); `bleu` before its view."""
    bleu = CorpusBleu(tokenizers)
    return {"token_accuracy": TokenSums("token_accuracy"), "perplexity": TokenSums("perplexity"),
            "bleu": bleu, "chrf": CorpusChrf(bleu)}
