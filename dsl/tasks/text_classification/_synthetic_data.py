"""A small text set a text network can learn in seconds, written by `dslrun data synthetic-text`.

Each text is a handful of filler words with the cues of its class put in:

- a class word ("goal", "drizzle"...), or only a two-word phrase whose words alone say
  nothing ("quite bright": both words also appear in phrases of no class), so a model
  that sees single words only cannot get every text right;
- sometimes a negated word of another class ("not goal" in a weather text), which a
  bag of words reads the wrong way;
- sometimes a decoy phrase made of the phrase words, belonging to no class.

The texts exercise a CSV reader: some hold commas, double quotes, line breaks and
non-ASCII UTF-8 words, so `train.csv` and `eval.csv` (header `text,label`, label the class
index) need RFC 4180 quoting. The layout and the completeness rule are those of
`dsl.datasets.layout`: dataset.json and train.csv are written last, so an interrupted run
is never taken for a complete one. Pure Python: no TensorFlow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from dsl.datasets import layout

# Names and words of the first classes; further classes get made-up words (stable per index).
TOPICS: list[tuple[str, list[str]]] = [
    ("sports", ["goal", "referee", "striker", "stadium"]),
    ("weather", ["drizzle", "forecast", "thunder", "humidity"]),
    ("food", ["recipe", "saucepan", "oven", "flavour"]),
    ("music", ["guitar", "melody", "concert", "drummer"]),
    ("travel", ["airport", "passport", "luggage", "hostel"]),
    ("science", ["molecule", "telescope", "experiment", "neutron"]),
]
# Class k's phrase is MODIFIERS[k % 10] + QUALITIES[(k // 10 + k) % 10]: unique for k < 100,
# and every word of it is also used by phrases of no class (decoys).
MODIFIERS = ["quite", "rather", "truly", "fairly", "really", "almost", "oddly", "simply", "mostly", "barely"]
QUALITIES = ["bright", "quiet", "heavy", "gentle", "sharp", "smooth", "narrow", "steady", "hollow", "plain"]
NEGATIONS = ["not", "never", "hardly", "no"]
_FILLER_WORDS = (
    "the a an this that it was is were be has had have and but or so then there here some many few "
    "one two we they he she you people day time way thing place story report note today yesterday "
    "later again also just still even about around after before during with without from into over "
    "under says said thinks seems looked felt went came made took gave told asked little big long "
    "short old new early late café naïve über déjà señor smörgåsbord crème 東京 straße"
)
FILLER = _FILLER_WORDS.split()
SYLLABLES = ["ka", "lo", "mi", "ze", "ru", "ta", "vo", "ni", "sha", "pe", "qua", "dri", "fen", "gor", "bli", "tum"]
WORDS_PER_CLASS = 4


@dataclass(frozen=True)
class TextSpec(layout.SetSpec):
    """What to generate (dsl.datasets.layout.SetSpec): texts have no settings of their own."""


def class_names(num_classes: int) -> list[str]:
    """Topic names for the first classes, `topic_<k>` after them."""
    return [TOPICS[k][0] if k < len(TOPICS) else f"topic_{k}" for k in range(num_classes)]


def class_words(k: int) -> list[str]:
    """The words that say class `k` (made-up ones past the named topics, the same for every seed)."""
    if k < len(TOPICS):
        return list(TOPICS[k][1])
    rng = random.Random(k)
    return ["".join(rng.choice(SYLLABLES) for _ in range(3)) + str(k) for _ in range(WORDS_PER_CLASS)]


def class_phrase(k: int) -> tuple[str, str]:
    """The two-word phrase of class `k`."""
    return MODIFIERS[k % len(MODIFIERS)], QUALITIES[(k // len(MODIFIERS) + k) % len(QUALITIES)]


def generate(count: int, spec: TextSpec, stream: int) -> list[tuple[str, int]]:
    """`count` (text, label) pairs, classes balanced; `stream` separates train from eval."""
    rng = random.Random(spec.seed * 1_000_003 + stream)
    labels = [index % spec.num_classes for index in range(count)]
    rng.shuffle(labels)
    phrases = {class_phrase(k) for k in range(spec.num_classes)}
    decoys = [(m, q) for m in MODIFIERS for q in QUALITIES if (m, q) not in phrases]
    return [(_text(rng, label, spec.num_classes, decoys), label) for label in labels]


def _text(rng: random.Random, label: int, num_classes: int, decoys: list[tuple[str, str]]) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(5, 14))]
    if rng.random() < 0.6:
        cues = [[rng.choice(class_words(label))] for _ in range(rng.choice((1, 1, 2)))]
    else:
        cues = [list(class_phrase(label))]
    if num_classes > 1 and rng.random() < 0.3:
        other = rng.choice([k for k in range(num_classes) if k != label])
        cues.append([rng.choice(NEGATIONS), rng.choice(class_words(other))])
    if rng.random() < 0.3:
        cues.append(list(rng.choice(decoys)))
    for cue in cues:
        position = rng.randint(0, len(words))
        words[position:position] = cue
    return _punctuated(rng, words)


def _punctuated(rng: random.Random, words: list[str]) -> str:
    """Words joined with the punctuation a CSV must quote: commas, quotes, line breaks."""
    if rng.random() < 0.15:
        index = rng.randrange(len(words))
        words[index] = f'"{words[index]}"'
    text = words[0].capitalize()
    for word in words[1:]:
        roll = rng.random()
        separator = ", " if roll < 0.1 else "\n" if roll < 0.13 else " "
        text += separator + word
    return text + rng.choice((".", ".", "!", "?", ""))


def write(out: Path, spec: TextSpec, force: bool = False) -> tuple[bool, dict[str, int]]:
    """Generate the set into `out` unless it is already there; returns (written, counts per split).

    RFC 4180: CRLF between records, fields with a comma, quote or line break quoted."""
    return layout.write_set(out, "synthetic-text", spec, force, lambda _, count, stream: generate(count, spec, stream),
                            class_names(spec.num_classes), header=("text", "label"), lineterminator="\r\n")



