"""A text split summed up for `dslrun validate --data`: lengths in tokens against `sequence_length`,
the vocabulary train gives, and how much of val the vocabulary misses.

The vectorizer keeps the `max_tokens` - 2 most frequent train words (ids 0 and 1 are padding
and out-of-vocabulary) and cuts every text to `sequence_length` tokens: a long tail cut off
or a val split written in other words limits accuracy before any model is tried. Pure Python.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

# Ids the vectorizer reserves: padding and out-of-vocabulary.
_RESERVED = 2


def text_facts(lengths: list[int], counts: Counter[str], inputter: dict[str, Any], train_counts: Counter[str] | None,
               is_train: bool) -> dict[str, Any]:
    """{"tokens": {median, p95, max}, "truncated": share, "vocabulary": words kept (train),
    "oov": share of tokens outside train's vocabulary (val/test)}."""
    if not lengths:
        return {}
    ngrams, limit = int(inputter.get("ngrams", 1)), int(inputter.get("sequence_length") or 0)
    tokens = sorted(token_count(n, ngrams) for n in lengths)
    facts: dict[str, Any] = {
        "tokens": {"median": tokens[len(tokens) // 2], "p95": tokens[min(len(tokens) - 1, int(0.95 * len(tokens)))],
                   "max": tokens[-1]},
        "truncated": round(sum(1 for t in tokens if limit and t > limit) / len(tokens), 4),
    }
    kept = vocabulary(train_counts, int(inputter.get("max_tokens") or 0)) if train_counts else None
    if is_train:
        facts["vocabulary"] = len(kept) if kept is not None else len(counts)
        facts["distinct_words"] = len(counts)
    elif kept is not None:
        total = sum(counts.values())
        facts["oov"] = round(sum(c for w, c in counts.items() if w not in kept) / total, 4) if total else 0.0
    return facts


def vocabulary(train_counts: Counter[str], max_tokens: int) -> set[str]:
    """The train words the vectorizer keeps: the most frequent, max_tokens - 2 of them."""
    room = max_tokens - _RESERVED if max_tokens else None
    return {word for word, _ in train_counts.most_common(room)}


def describe(facts: dict[str, Any], inputter: dict[str, Any]) -> str:
    """`tokens median 12, 95% 30, max 61; 4.1% cut at sequence_length 48; vocabulary 5321 of 6002 words`."""
    if not facts:
        return ""
    tokens = facts["tokens"]
    parts = [f"tokens median {tokens['median']}, 95% {tokens['p95']}, max {tokens['max']}",
             f"{facts['truncated']:.1%} cut at sequence_length {inputter.get('sequence_length')}"]
    if "vocabulary" in facts:
        parts.append(f"vocabulary {facts['vocabulary']} of {facts['distinct_words']} distinct words "
                     f"(max_tokens {inputter.get('max_tokens')})")
    if "oov" in facts:
        parts.append(f"{facts['oov']:.1%} of tokens outside train's vocabulary")
    return "; ".join(parts)


def token_count(word_count: int, ngrams: int) -> int:
    """Tokens the vectorizer makes of `word_count` words: every n-gram up to `ngrams` (unigrams first)."""
    return sum(max(0, word_count - n + 1) for n in range(1, ngrams + 1))
