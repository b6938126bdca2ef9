"""Machine translation: a sentence in, its translation out (parallel text, SentencePiece, a Transformer, BLEU).

What the task declares to the language: its batch, a sentence pair (`sentence`: the source's ids
and the decoder's input, `<s>` then the target's ids) and the ids the decoder must predict
(`translation`), each `max_length + 1` ids; and its facts: what the inputter's SentencePiece
models are (sizes, `<s>`/`</s>` ids, the models themselves, which the modeler detokenises with)
and the modeler's `decoding` settings, which the network's in-graph search runs with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsl.language.facts import PartSpec, register_batch_word, register_fact


def _length(facts: Callable[[str], Any]) -> int:
    return int(facts("max_length") or 1) + 1


def _sentence(facts: Callable[[str], Any]) -> PartSpec:
    return {"source": ((_length(facts),), "int32"), "target": ((_length(facts),), "int32")}


register_batch_word("sentence", "a sentence pair (source ids, decoder input)", _sentence)
register_batch_word("translation", "a translation's ids", lambda facts: ((_length(facts),), "int32"))
register_fact("max_length", param="max_length", description="subword tokens a sentence may have, each side")
register_fact("target_vocabulary_size", param="vocab_size",
              description="target ids are below it (the target SentencePiece model's pieces + padding; at most vocab_size + 1)")
register_fact("bos_id", param=None, description="the id of <s>, which starts the decoder's input")
register_fact("eos_id", param=None, description="the id of </s>, which ends a sentence")
register_fact("tokenizers", param=None, description="the run's SentencePiece models (source and target)")
register_fact("decoding", param=None, description="the modeler's search: beam_size, length_penalty, max_decode_length")
