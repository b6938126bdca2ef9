"""What the text inputters share: their parameters, the texts they read, the saved vocabulary.

TensorFlow-free (the public inputter modules import it at their top, and `dslrun validate`
imports those); the tf.data pipeline and the Keras vectorizer are `_text_pipeline.py`.

The vocabulary. Token ids are positions in a vocabulary built from the train split: the
network's embedding has one row per token, so a trained model is only meaningful with the
vocabulary it was trained with. The first build writes it to the run directory
(`vocabulary.json`: the settings it was built with and the tokens, id = position); every
later build of the same pipeline (a resumed run, `dslrun eval`, `predict`, `export`) reads
it back instead of building it again from whatever the train files hold now.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.inputters.common import COMMON_PARAMS
from dsl.language.errors import DslError

VOCABULARY_FILE = "vocabulary.json"
STANDARDIZE = ("lower_and_strip_punctuation", "lower", "strip_punctuation", "none")

VOCABULARY_PARAMS: dict[str, dict[str, Any]] = {
    "max_tokens": {
        "description": (
            "Largest vocabulary: the most frequent tokens of the train split, padding (id 0) and the "
            "out-of-vocabulary token (id 1) included; rarer tokens map to id 1."
        ),
        "type": "integer",
        "minimum": 3,
        "default": 20000,
    },
    "sequence_length": {
        "description": "Token ids per text: longer texts are cut, shorter ones padded with id 0.",
        "type": "integer",
        "minimum": 1,
        "default": 128,
    },
    "standardize": {
        "description": (
            "What is done to a text before it is split at whitespace: lower_and_strip_punctuation, "
            "lower, strip_punctuation, or none."
        ),
        "enum": list(STANDARDIZE),
        "default": "lower_and_strip_punctuation",
    },
    "ngrams": {
        "description": "Tokens are the words and the word n-grams up to this length (2 = words and word pairs).",
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
        "default": 1,
    },
}

CLASSES_PARAM: dict[str, Any] = {
    "type": ["array", "null"],
    "items": {"type": "string", "minLength": 1},
    "minItems": 2,
    "uniqueItems": True,
    "default": None,
}

# The shared inputter options that apply to texts held in memory (nothing to decode, cache or skip).
TEXT_COMMON_PARAMS: dict[str, dict[str, Any]] = {
    name: COMMON_PARAMS[name] for name in ("batch_size", "drop_remainder", "shuffle_buffer", "prefetch")
}


@dataclass
class TextSplit:
    """The texts of one mode and their class indices, in file order."""

    key: str  # the YAML key, e.g. "inputter.train"
    texts: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, text: str, label: int) -> None:
        self.texts.append(text)
        self.labels.append(label)


def vocabulary_settings(params: dict[str, Any]) -> dict[str, Any]:
    """What the vocabulary depends on (the sequence length does not: it only cuts or pads)."""
    return {"max_tokens": params["max_tokens"], "standardize": params["standardize"],
            "ngrams": params["ngrams"], "split": "whitespace"}


def load_vocabulary(model_dir: Path, settings: dict[str, Any]) -> list[str] | None:
    """The tokens saved in `model_dir`, or None when there are none; an error when they were
    built with other settings, since the trained weights only fit the saved ones."""
    path = model_dir / VOCABULARY_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        tokens, built_with = saved["tokens"], saved["settings"]
        if not (isinstance(tokens, list) and all(isinstance(t, str) for t in tokens) and isinstance(built_with, dict)):
            raise ValueError("tokens must be a list of strings and settings an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DslError(f"cannot read the vocabulary {path}: {exc}; delete it to build it again from the train data "
                       "(the model's checkpoints then no longer fit: use a new runner.model_dir)") from None
    changed = [f"{name} {built_with.get(name)!r} (now {value!r})" for name, value in settings.items()
               if built_with.get(name) != value]
    if changed:
        raise DslError(
            f"the vocabulary in {path} was built with inputter.{', inputter.'.join(changed)}, and the model of "
            "this run directory was trained on it; set them back, or start over with --no-resume (or a new "
            "runner.model_dir) to build a new vocabulary"
        )
    return tokens


def save_vocabulary(model_dir: Path, settings: dict[str, Any], tokens: list[str]) -> None:
    """Write the vocabulary atomically: a reader (another rank, a crash) sees all of it or none."""
    model_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"settings": settings, "tokens": tokens}, ensure_ascii=False, indent=0) + "\n"
    fd, temporary = tempfile.mkstemp(dir=model_dir, prefix=f".{VOCABULARY_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, model_dir / VOCABULARY_FILE)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def text_digest(text: str) -> bytes:
    """The digest `dslrun validate --data` compares to find val texts that are also train texts."""
    import hashlib

    return hashlib.sha1(text.encode("utf-8")).digest()


# TextVectorization's default punctuation (tf.keras.layers.TextVectorization, DEFAULT_STRIP_REGEX).
_PUNCTUATION = re.compile(r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']')


def words(text: str, standardize: str) -> list[str]:
    """The words of `text` as the vectorizer splits them (standardized, then split at whitespace),
    in pure Python, for `dslrun validate --data` (lengths, vocabulary, out-of-vocabulary share)."""
    if standardize in ("lower_and_strip_punctuation", "lower"):
        text = text.lower()
    if standardize in ("lower_and_strip_punctuation", "strip_punctuation"):
        text = _PUNCTUATION.sub("", text)
    return text.split()
