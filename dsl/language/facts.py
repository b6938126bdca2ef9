"""The data facts and batch words a task declares, so that the language and the engine need not know them.

A **fact** is something the data is, shared between sections so that none repeats another's
settings: every task has its classes; images have a shape, texts a length and a vocabulary
(those the language knows, `rules.Declared` and `context.BuildContext` fields). What only one
task's data has (detection's `max_boxes`, segmentation's `ignore_label`) the task registers here
from its `__init__.py`: the inputter parameter that declares it, read by `dslrun validate` into
`Declared.fact(name)`, and learnt by the build context (`BuildContext.fact(name)`).

A **batch word** names a part of a batch (`register(batch=("image", "boxes"))`): what a message
calls it, and the (shape, dtype) of one example of it for `validate --build`. The language knows
"image", "tokens" and "class"; a task registers its own ("mask", "boxes").

Pure Python: `dslrun validate` reads this without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The (shape, dtype) of one example's part, or a dict of them for a part made of several tensors.
TensorSpec = tuple[tuple[int, ...], str]
PartSpec = TensorSpec | dict[str, TensorSpec]


@dataclass(frozen=True)
class Fact:
    """A task's own fact: `name`, the inputter parameter that declares it (None: a component's
    registered `facts` reports it, as a detection network its anchors), what it means."""

    name: str
    param: str | None
    description: str


@dataclass(frozen=True)
class BatchWord:
    """A part of a batch: `meaning` in messages, `spec(facts)` one example's (shape, dtype), from the
    declared facts (`facts(name)` returns a fact's value or None)."""

    word: str
    meaning: str
    spec: Callable[[Callable[[str], Any]], PartSpec]


_FACTS: dict[str, Fact] = {}
_WORDS: dict[str, BatchWord] = {}


def register_fact(name: str, *, param: str | None, description: str) -> Fact:
    """Declare a task's fact; the same name twice (from two tasks) is an error naming it."""
    if name in _FACTS and _FACTS[name] != Fact(name, param, description):
        raise ValueError(f"the fact {name!r} is registered twice")
    _FACTS[name] = Fact(name, param, description)
    return _FACTS[name]


def register_batch_word(word: str, meaning: str, spec: Callable[[Callable[[str], Any]], PartSpec]) -> BatchWord:
    """Declare a part of a batch a task's components make or take."""
    if word in _WORDS and _WORDS[word].meaning != meaning:
        raise ValueError(f"the batch word {word!r} is registered twice")
    _WORDS[word] = BatchWord(word, meaning, spec)
    return _WORDS[word]


def _image(facts: Callable[[str], Any]) -> PartSpec:
    return (tuple(facts("image_shape") or (1, 1, 1)), "float32")


register_batch_word("image", "an image", _image)
register_batch_word("tokens", "a text's tokens", lambda facts: ((facts("sequence_length") or 1,), "int32"))
register_batch_word("class", "one class per example", lambda facts: ((), "int32"))


def task_facts() -> dict[str, Fact]:
    """Every fact a task registered (the tasks imported first)."""
    from dsl.language import registry

    registry.load_all()
    return dict(_FACTS)


def batch_words() -> dict[str, BatchWord]:
    """Every registered batch word (the tasks imported first)."""
    from dsl.language import registry

    registry.load_all()
    return dict(_WORDS)
