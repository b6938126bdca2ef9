"""`parallel_text`: sentence pairs from a TSV or two aligned files, as SentencePiece ids.

    inputter:
      type: parallel_text
      train: data/train.tsv                                  # source<TAB>target per line
      val: {source: data/eval.en, target: data/eval.xx}      # or two files, line n with line n
      vocab_size: 8000
      max_length: 64

Every file is read and checked when the pipeline is built, so a bad line (a line-count mismatch,
an empty side, a sentence over `max_length` subword tokens) stops the run before training with
its file and line; `skip_long: true` leaves the long pairs out instead, counted. The SentencePiece
models are trained on the train split on the first run and kept in the run directory
(`_sentencepiece.py`), so resume, eval, predict and export read the same ones back.
"""

from __future__ import annotations

from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import COMMON_PARAMS, MODES
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register, with_defaults

_FILE = {"type": "string", "minLength": 1}
_ENTRY = {
    "anyOf": [
        _FILE,
        {"type": "object", "required": ["source", "target"], "additionalProperties": False, "properties": {
            "source": {**_FILE, "description": "The source sentences, one per line (UTF-8)."},
            "target": {**_FILE, "description": "Their translations, line n translating the source's line n."},
        }},
    ]
}
_USAGE = {"train": "training (and the SentencePiece models)", "val": "validation (workflow val phases)",
          "test": "`dslrun eval --mode test`"}

PARAMS: dict[str, dict[str, Any]] = {
    **{mode: {
        "description": (f"Sentence pairs for {_USAGE[mode]}: a TSV file (source<TAB>target per line), "
                        "{source: FILE, target: FILE} (aligned lines), or a list of them; null = none."),
        "anyOf": [{"type": "null"}, _ENTRY, {"type": "array", "items": _ENTRY, "minItems": 1}],
        "default": None,
    } for mode in MODES},
    "vocab_size": {
        "description": ("Subword pieces of each SentencePiece model trained on the train split (fewer when "
                        "the text has fewer); id 0 is padding on top of them."),
        "type": "integer", "minimum": 8, "default": 8000,
    },
    "model_type": {
        "description": "SentencePiece's segmentation: unigram (a unigram language model) or bpe (byte-pair encoding).",
        "enum": ["unigram", "bpe"], "default": "unigram",
    },
    "shared_vocabulary": {
        "description": ("One SentencePiece model for both sides, trained on sources and targets together (needed by "
                        "network.shared_embeddings); false = one model per side."),
        "type": "boolean", "default": True,
    },
    "source_model": {
        "description": ("An existing SentencePiece .model file for the source side (both sides when "
                        "shared_vocabulary); null = train one on inputter.train."),
        "type": ["string", "null"], "minLength": 1, "default": None,
    },
    "target_model": {
        "description": "An existing SentencePiece .model file for the target side; null = source_model's.",
        "type": ["string", "null"], "minLength": 1, "default": None,
    },
    "max_length": {
        "description": ("Subword tokens a sentence may have, on each side (<s> and </s> not counted); a longer one "
                        "is an error naming its line, or left out with skip_long. Batches are padded to it."),
        "type": "integer", "minimum": 1, "default": 64,
    },
    "skip_long": {
        "description": "Leave out the pairs with a side over max_length (counted and reported) instead of stopping.",
        "type": "boolean", "default": False,
    },
    **{name: COMMON_PARAMS[name] for name in ("batch_size", "drop_remainder", "shuffle_buffer", "prefetch")},
    "batch_tokens": {
        "description": ("Train batches sized in tokens instead of pairs: about this many tokens per global batch (a "
                        "pair counts its longer side, padding included), pairs of similar length batched together; "
                        "N ranks take batch_tokens / N each, as they take batch_size / N. null = batch_size pairs. "
                        "Val and test batch by batch_size."),
        "type": ["integer", "null"], "minimum": 8, "default": None,
    },
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """`dslrun validate --data`: the pairs of `mode` (lengths, outliers, copies) and every bad line, located."""
    from dsl.tasks.machine_translation._data_check import split_of

    return split_of(with_defaults(params, PARAMS), mode)


@register(
    "inputter",
    "parallel_text",
    params=PARAMS,
    examples=examples,
    batch=("sentence", "translation"),
    # What `dslrun validate --build` traces with before any model is trained: the sizes' upper bounds.
    facts=lambda params: {"vocabulary_size": params["vocab_size"], "sequence_length": params["max_length"] + 1},
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Sentence pairs (a TSV, or two aligned files) as SentencePiece ids trained on the train split.

    Read and check every declared file now (errors name the file and line), then tokenise.
    """
    from dsl.tasks.machine_translation._parallel_files import read_split
    from dsl.tasks.machine_translation._pipeline import ParallelTextInputter

    if params["target_model"] and not params["source_model"]:
        raise DslError("inputter.target_model is set without inputter.source_model; name both .model files, "
                       "or neither to train them on inputter.train")
    splits = {mode: read_split(params[mode], f"inputter.{mode}") for mode in MODES if params[mode] is not None}
    if not splits:
        raise DslError("the parallel_text inputter declares no data; set inputter.train (and val / test)")
    return ParallelTextInputter(params, splits, context)
