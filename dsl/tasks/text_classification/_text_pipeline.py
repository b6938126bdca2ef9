"""Texts as token ids for the network: the Keras vectorizer, and the tf.data pipeline over them.

Private and TensorFlow-importing: the text inputter modules import it inside `build`.

Every text is vectorised once, when the inputter is built, into an int32 array
[examples, sequence_length]; the datasets are made from those arrays. So no lookup table
is referenced inside a dataset's graph: a parameter-server cluster ships each worker the
function that builds its dataset, and a table living in the coordinator could not go with
it. The vectorizer itself serves `predict` and the exported model (raw strings in).

The pipeline keeps the shared order of `dsl.inputters.pipeline`:

    token ids -> shard -> shuffle (train) -> augment (when it changes anything) -> batch -> prefetch
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from dsl.inputters.pipeline import BaseInputter, remember_listings
from dsl.inputters.serving import ServingInput
from dsl.inputters.text_files import predict_texts
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.tasks.text_classification._text import (
    VOCABULARY_FILE,
    TextSplit,
    load_vocabulary,
    save_vocabulary,
    vocabulary_settings,
)

# Texts vectorised per call when the inputter is built (bounds the memory of one call).
CHUNK = 4096


def make_vectorizer(params: dict[str, Any], tokens: list[str] | None = None) -> tf.keras.layers.TextVectorization:
    """Keras' TextVectorization with the inputter's settings (and a vocabulary, when given)."""
    return tf.keras.layers.TextVectorization(
        max_tokens=params["max_tokens"],
        standardize=None if params["standardize"] == "none" else params["standardize"],
        split="whitespace",
        ngrams=params["ngrams"] if params["ngrams"] > 1 else None,
        output_mode="int",
        output_sequence_length=params["sequence_length"],
        vocabulary=tokens,
        name="text_vectorization",
    )


def adapted_vocabulary(texts: list[str], params: dict[str, Any]) -> list[str]:
    """The vocabulary of `texts`: tokens by decreasing count, ties by the token (Keras' order),
    so every process that adapts on the same texts gets the same one."""
    vectorizer = make_vectorizer(params)
    vectorizer.adapt(tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string)).batch(CHUNK))
    return [str(token) for token in vectorizer.get_vocabulary()]


def run_vocabulary(params: dict[str, Any], splits: dict[str, TextSplit], context: BuildContext) -> list[str]:
    """The run directory's vocabulary, or one built from the whole (unsharded) train split,
    saved there by the chief; every rank builds the same from the same texts. A fresh start
    (`--no-resume`) builds it anew: the train texts may have changed since."""
    model_dir = Path(context.model_dir)
    settings = vocabulary_settings(params)
    tokens = None if getattr(context, "fresh_start", False) else load_vocabulary(model_dir, settings)
    if tokens is not None:
        return tokens
    if "train" not in splits:
        raise DslError(f"there is no vocabulary in {model_dir / VOCABULARY_FILE} and the inputter has no train data "
                       "to build one from; set inputter.train, or point runner.model_dir at a trained run")
    tokens = adapted_vocabulary(splits["train"].texts, params)
    if context.placement.is_chief:
        save_vocabulary(model_dir, settings, tokens)
    return tokens


class TextInputter(BaseInputter):
    """Texts and class labels held as token ids in memory (dsl.engine.contracts.Inputter).

    Args:
        params: the inputter section, defaults filled.
        splits: the texts of each declared mode.
        context: the BuildContext (`model_dir` for the vocabulary, `placement` for who writes it).
        class_names: the classes' names when the data names them.
    """

    def __init__(self, params: dict[str, Any], splits: dict[str, TextSplit], context: BuildContext,
                 class_names: list[str] | None = None) -> None:
        # Not BaseInputter.__init__: a text has no image shape. What is shared is `dataset`'s order.
        self.params = params
        self.num_classes = int(params["num_classes"])
        self.class_names = class_names
        self.splits = splits
        remember_listings([])  # file lists of an image inputter built before this one no longer apply
        self.vectorizer = make_vectorizer(params, run_vocabulary(params, splits, context))
        self.arrays = {mode: (self.vectorize(split.texts), np.asarray(split.labels, np.int32))
                       for mode, split in splits.items()}

    def vectorize(self, texts: list[str]) -> npt.NDArray[np.int32]:
        """int32 token ids [len(texts), sequence_length]."""
        chunks = [self._vectorized(tf.constant(texts[start:start + CHUNK], tf.string)).numpy()
                  for start in range(0, len(texts), CHUNK)]
        return np.concatenate(chunks) if chunks else np.zeros([0, self.params["sequence_length"]], np.int32)

    # ---------------------------------------------------------------- the Inputter protocol
    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"num_classes": self.num_classes, "vocabulary_size": self.vectorizer.vocabulary_size(),
                                 "sequence_length": self.params["sequence_length"]}
        if self.class_names:
            facts["class_names"] = list(self.class_names)
        return facts

    def num_examples(self, mode: str) -> int:
        split = self.splits.get(mode)
        return len(split) if split is not None else 0

    def dataset(self, mode: str, augment: Any = None, num_shards: Any = 1, shard_index: Any = 0,
                seed: int | tf.Tensor | None = None, batch_size: int | None = None,
                skip: int | tf.Tensor = 0) -> tf.data.Dataset:
        """Batches of (token ids int32 (B, sequence_length), labels int32 (B,)) for `mode`."""
        self._check_mode(mode)
        return self.examples_dataset(self.arrays[mode], mode, augment, num_shards, shard_index, seed, batch_size, skip)

    def serving_inputs(self) -> list[Any]:
        """Raw UTF-8 strings, vectorised in the graph by the run's vocabulary (kept in the SavedModel)."""
        length = self.params["sequence_length"]
        return [ServingInput(
            "text", tf.TensorSpec([None], tf.string, name="text"), self._vectorized,
            f"text: string [batch], raw UTF-8 texts, vectorised in the graph to {length} token ids each",
            keep=[self.vectorizer],
        )]

    def predict_inputs(self, paths: list[str], texts: list[str]) -> list[tuple[dict[str, Any], tf.Tensor]]:
        """Each --text, then each non-blank line of each file (UTF-8), as token ids."""
        sources, problems = predict_texts(paths, texts)
        if problems:
            raise DslError("\n".join(problems))
        if not sources:
            raise DslError(f"no text to predict: {', '.join(paths)} hold only blank lines")
        vectors = self.vectorize([source["text"] for source in sources])
        return [(source, tf.constant(vector)) for source, vector in zip(sources, vectors)]

    # ------------------------------------------------------------------------ internals
    def _vectorized(self, texts: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.vectorizer(texts), tf.int32)
