"""Sentence pairs as padded id arrays, and the tf.data pipeline over them.

Private and TensorFlow-importing: `parallel_text.build` imports it. Every pair is tokenised once,
when the inputter is built, into int32 arrays of `max_length + 1` ids (no lookup in a dataset's
graph, so a parameter-server worker can build its dataset alone, as for text classification):

    features["source"]   the source's ids, then </s>, then padding (0)
    features["target"]   <s>, then the target's ids (the decoder's input: teacher forcing)
    targets              the target's ids, then </s> (what the decoder must predict)

The pipeline keeps the shared order of `dsl.inputters.pipeline`:
ids -> shard -> shuffle (train) -> batch -> prefetch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.inputters.pipeline import AUTOTUNE, BaseInputter, leave_out, remember_listings
from dsl.inputters.serving import ServingInput
from dsl.inputters.text_files import predict_texts
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.tasks.machine_translation import _token_batches as token_batches
from dsl.tasks.machine_translation._parallel_files import PairSplit
from dsl.tasks.machine_translation._sentencepiece import run_tokenizers


class ParallelTextInputter(BaseInputter):
    """Sentence pairs held as id arrays in memory (dsl.engine.contracts.Inputter).

    Args:
        params: the inputter section, defaults filled.
        splits: the pairs of each declared mode.
        context: the BuildContext (`model_dir` for the SentencePiece models, `placement` for who writes them).
    """

    def __init__(self, params: dict[str, Any], splits: dict[str, PairSplit], context: BuildContext) -> None:
        # Not BaseInputter.__init__: a sentence has no image shape. What is shared is `dataset`'s order.
        self.params = params
        self.length = int(params["max_length"]) + 1
        remember_listings([])
        train = (splits["train"].sources, splits["train"].targets) if "train" in splits else None
        self.tokenizers = run_tokenizers(params, train, Path(context.model_dir), context.placement.is_chief,
                                         bool(getattr(context, "fresh_start", False)))
        self.skipped: dict[str, list[str]] = {}
        self.splits: dict[str, PairSplit] = {}
        self.arrays = {mode: self._arrays(mode, split) for mode, split in splits.items()}
        self.is_chief = context.placement.is_chief
        self.buckets: list[token_batches.Bucket] = []
        if params.get("batch_tokens") and "train" in self.arrays:
            features, targets = self.arrays["train"]
            lengths = np.maximum((features["source"] > 0).sum(axis=1), (targets > 0).sum(axis=1))
            self.buckets = token_batches.buckets(lengths, self.length)
        self._described = False

    def _arrays(self, mode: str, split: PairSplit) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(features, targets) arrays of a split; a pair over max_length is an error or, with skip_long, left out."""
        tok, limit = self.tokenizers, self.params["max_length"]
        sources, targets = tok.encode("source", split.sources), tok.encode("target", split.targets)
        kept, self.skipped[mode] = [], []
        for index, (pair, source, target) in enumerate(zip(split.pairs, sources, targets)):
            longest = max(len(source), len(target))
            if longest <= limit:
                kept.append(index)
            elif self.params["skip_long"]:
                self.skipped[mode].append(pair.where)
            else:
                side = "source" if len(source) > limit else "target"
                raise DslError(f"{pair.path} line {pair.line}: the {side} sentence has {longest} subword tokens, over "
                               f"inputter.max_length {limit}; raise max_length, or set inputter.skip_long: true "
                               "to leave such pairs out")
        if not kept:
            raise DslError(f"{split.key}: every pair is over inputter.max_length {limit} tokens; raise max_length")
        self.splits[mode] = PairSplit(split.key, [split.pairs[index] for index in kept])
        rows = len(kept)
        source_ids = np.zeros([rows, self.length], np.int32)
        decoder_in = np.zeros([rows, self.length], np.int32)
        decoder_out = np.zeros([rows, self.length], np.int32)
        for row, index in enumerate(kept):
            source, target = sources[index], targets[index]
            source_ids[row, :len(source) + 1] = [*source, tok.eos_id]
            decoder_in[row, :len(target) + 1] = [tok.bos_id, *target]
            decoder_out[row, :len(target) + 1] = [*target, tok.eos_id]
        return {"source": source_ids, "target": decoder_in}, decoder_out

    # ---------------------------------------------------------------- the Inputter protocol
    def facts(self) -> dict[str, Any]:
        tok = self.tokenizers
        return {"vocabulary_size": tok.vocabulary_size("source"), "sequence_length": self.length,
                "target_vocabulary_size": tok.vocabulary_size("target"), "bos_id": tok.bos_id,
                "eos_id": tok.eos_id, "max_length": self.params["max_length"], "tokenizers": tok}

    def num_examples(self, mode: str) -> int:
        split = self.splits.get(mode)
        return len(split) if split is not None else 0

    def steps_per_epoch(self, batch_size: int | None, world_size: int) -> int | None:
        """By pairs (`batch_size`), or with `batch_tokens` the token-sized batches' count, the same on every rank."""
        if not self.buckets:
            return super().steps_per_epoch(batch_size, world_size)
        budget = self._budget(batch_size)
        if self.is_chief and not self._described:  # once: what the global batch became at this world size
            self._described = True
            print(f"dslrun: {token_batches.describe(self.buckets, budget, world_size, self.params['batch_tokens'])}",
                  file=sys.stderr, flush=True)
        return token_batches.steps(self.buckets, budget, world_size, self.params["drop_remainder"])

    def _budget(self, batch_size: int | None) -> int:
        """This rank's tokens per batch: batch_tokens scaled as the engine scaled batch_size to this rank's batch."""
        scale = (batch_size or self.params["batch_size"]) / self.params["batch_size"]
        return max(1, int(self.params["batch_tokens"] * scale))

    def skipped_examples(self, mode: str) -> int | None:
        return len(self.skipped.get(mode, [])) if self.params["skip_long"] else None

    def dataset(self, mode: str, augment: Any = None, num_shards: Any = 1, shard_index: Any = 0,
                seed: int | tf.Tensor | None = None, batch_size: int | None = None,
                skip: int | tf.Tensor = 0) -> tf.data.Dataset:
        """Batches of ({"source", "target"} int32 (B, max_length + 1), targets int32 (B, max_length + 1)).
        Token batches differ in examples, so `skip` leaves out whole batches (held in memory: cheap)."""
        self._check_mode(mode)
        if mode == "train" and self.buckets:
            data = token_batches.dataset(self.arrays[mode], self.buckets, self._budget(batch_size), num_shards,
                                         shard_index, seed, self.params["drop_remainder"])
            return leave_out(data, skip).prefetch(AUTOTUNE)
        return self.examples_dataset(self.arrays[mode], mode, augment, num_shards, shard_index, seed, batch_size, skip)

    def serving_inputs(self) -> list[Any]:
        """Raw UTF-8 source sentences, tokenised in the graph by the run's SentencePiece model (kept in the SavedModel)."""
        tok = self.tokenizers
        return [ServingInput(
            "text", tf.TensorSpec([None], tf.string, name="text"), self._graph_source,
            f"text: string [batch], raw source sentences, tokenised in the graph (at most {self.length - 1} tokens)",
            keep=tok.graph_ops(),
        )]

    def predict_inputs(self, paths: list[str], texts: list[str]) -> list[tuple[dict[str, Any], Any]]:
        """Each --text, then each non-blank line of each file (UTF-8), as source ids."""
        sources, problems = predict_texts(paths, texts)
        ids = self.tokenizers.encode("source", [source["text"] for source in sources])
        for source, row in zip(sources, ids):
            if len(row) >= self.length:
                where = f"{source['file']} line {source['line']}" if "file" in source else f"--text {source['text'][:40]!r}"
                problems.append(f"{where}: {len(row)} subword tokens, over inputter.max_length {self.length - 1}; "
                                "split the sentence")
        if problems:
            raise DslError("\n".join(problems))
        if not sources:
            raise DslError(f"no sentence to translate: {', '.join(paths)} hold only blank lines")
        examples = []
        for source, row in zip(sources, ids):
            padded = np.zeros([self.length], np.int32)
            padded[:len(row) + 1] = [*row, self.tokenizers.eos_id]
            examples.append((source, {"source": tf.constant(padded)}))
        return examples

    # ------------------------------------------------------------------------ internals
    def _graph_source(self, texts: tf.Tensor) -> dict[str, tf.Tensor]:
        """Raw strings -> {"source": ids (B, max_length + 1)}: SentencePiece in the graph, shifted, </s>, padded."""
        pieces = self.tokenizers.graph_tokenizer("source").tokenize(texts)
        ids = pieces[:, :self.length - 1] + 1
        eos = tf.fill([tf.shape(texts)[0], 1], tf.constant(self.tokenizers.eos_id, tf.int32))
        ids = tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1)
        return {"source": ids.to_tensor(default_value=0, shape=[None, self.length])}
