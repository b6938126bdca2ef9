"""A small language pair a Transformer can learn in minutes, written by `dslrun data synthetic-translation`.

The source is a little English: a subject, a verb and an object, each noun phrase a determiner
or a number, maybe an adjective, and a noun, sometimes a time word in front:

    today the red cat sees two small dogs

The target is a made-up language that a word-by-word copy cannot produce:

    oggi la miko roza du rafaen pikai vidat

- **reordering**: the adjective follows its noun, the determiner stays in front, and the verb
  goes to the end of the clause (subject-object-verb);
- **agreement**: a plural noun takes `-en` and its adjective `-i`; the verb takes `-t` after a
  singular subject and `-nt` after a plural one, so the verb's ending depends on a word five
  positions away.

Both layouts a `parallel_text` inputter reads are written: one TSV per split
(`source<TAB>target`) and two aligned files per split (`train.en` / `train.xx`). The layout's
completeness rule is that of `dsl.datasets.layout`: dataset.json and then train.tsv are written
last, so an interrupted run is never taken for a complete one. Pure Python.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from dsl.datasets import layout

NOUNS = {"cat": "miko", "dog": "rafa", "bird": "tilu", "fish": "pesh", "horse": "kaval", "child": "nino",
         "farmer": "grano", "teacher": "dokto", "baker": "pano", "sailor": "marino"}
PLURAL_NOUNS = {"child": "children", "fish": "fish"}  # the English plurals that do not just add -s
ADJECTIVES = {"red": "roza", "small": "pika", "big": "grosa", "old": "vekka", "happy": "feli", "green": "verda",
              "quiet": "kalma", "brave": "kura"}
VERBS = {"sees": ("see", "vida"), "likes": ("like", "ama"), "follows": ("follow", "segu"), "feeds": ("feed", "nutri"),
         "finds": ("find", "trova"), "calls": ("call", "voka")}
SINGULAR = {"the": "la", "a": "un"}
NUMBERS = {"two": "du", "three": "tri", "four": "kvar", "five": "kvin"}
TIMES = {"today": "oggi", "often": "ofte", "later": "poste"}

SOURCE_SUFFIX, TARGET_SUFFIX = "en", "xx"  # the two-file layout: train.en / train.xx


@dataclass(frozen=True)
class TranslationSpec:
    """What to generate; also the manifest that tells a complete directory from another."""

    num_train: int = 2000
    num_val: int = 200
    seed: int = 0


def noun_phrase(rng: random.Random) -> tuple[str, str, bool]:
    """(English, target, plural) of one noun phrase."""
    noun = rng.choice(sorted(NOUNS))
    adjective = rng.choice(sorted(ADJECTIVES)) if rng.random() < 0.6 else None
    plural = rng.random() < 0.45
    if plural:
        number = rng.choice(sorted(NUMBERS))
        english = [number, *([adjective] if adjective else []), PLURAL_NOUNS.get(noun, noun + "s")]
        target = [NUMBERS[number], NOUNS[noun] + "en", *([ADJECTIVES[adjective] + "i"] if adjective else [])]
    else:
        determiner = rng.choice(sorted(SINGULAR))
        english = [determiner, *([adjective] if adjective else []), noun]
        target = [SINGULAR[determiner], NOUNS[noun], *([ADJECTIVES[adjective]] if adjective else [])]
    return " ".join(english), " ".join(target), plural


def sentence(rng: random.Random) -> tuple[str, str]:
    """One (source, target) pair."""
    subject, subject_target, plural = noun_phrase(rng)
    obj, object_target, _ = noun_phrase(rng)
    verb = rng.choice(sorted(VERBS))
    english_verb, stem = (VERBS[verb][0], VERBS[verb][1]) if plural else (verb, VERBS[verb][1])
    source = f"{subject} {english_verb} {obj}"
    target = f"{subject_target} {object_target} {stem}{'nt' if plural else 't'}"
    if rng.random() < 0.3:
        time = rng.choice(sorted(TIMES))
        source, target = f"{time} {source}", f"{TIMES[time]} {target}"
    return source, target


def generate(count: int, spec: TranslationSpec, stream: int) -> list[tuple[str, str]]:
    """`count` pairs; `stream` separates train (0) from eval (1)."""
    rng = random.Random(spec.seed * 1_000_003 + stream)
    return [sentence(rng) for _ in range(count)]


def write(out: Path, spec: TranslationSpec, force: bool = False) -> tuple[bool, dict[str, int]]:
    """Write both layouts of both splits into `out` unless it holds them already; (written, counts)."""
    manifest = {"kind": "synthetic-translation", **asdict(spec)}
    counts = {"train": spec.num_train, "eval": spec.num_val}
    listings = [f"{split}.{suffix}" for split in counts for suffix in ("tsv", SOURCE_SUFFIX, TARGET_SUFFIX)]
    if not force and _complete(out, manifest, listings):
        return False, counts
    out.mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", layout.MANIFEST):
        (out / name).unlink(missing_ok=True)
    pairs = {split: generate(count, spec, stream) for stream, (split, count) in enumerate(counts.items())}
    for split in ("eval", "train"):  # train.tsv last: it marks the set complete
        rows = pairs[split]
        layout.atomic_text(out / f"{split}.{SOURCE_SUFFIX}", "".join(f"{source}\n" for source, _ in rows))
        layout.atomic_text(out / f"{split}.{TARGET_SUFFIX}", "".join(f"{target}\n" for _, target in rows))
        if split == "train":
            layout.atomic_text(out / layout.MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        layout.atomic_text(out / f"{split}.tsv", "".join(f"{source}\t{target}\n" for source, target in rows))
    return True, counts


def _complete(out: Path, manifest: dict[str, object], listings: list[str]) -> bool:
    try:
        found = json.loads((out / layout.MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return found == manifest and all((out / name).is_file() for name in listings)
