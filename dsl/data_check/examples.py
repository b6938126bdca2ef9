"""What an inputter hands `dslrun validate --data`: its examples, one split at a time.

An inputter registers `examples(params, mode) -> Split | None` (see `dsl.language.registry`); it
lists its data as it would when built, without TensorFlow, and yields every example and
every problem of the listing (a bad CSV row, a label out of range) instead of stopping at
the first. The image files themselves are inspected by `dsl.data_check` afterwards; an
example without an image (a text) carries the digest of its content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dsl.data_check.images import ImageFacts
from dsl.language.diagnostics import Location


@dataclass(frozen=True)
class Example:
    """One listed example: its label, where it is listed, and its image (a file, or facts already read).

    An example that is no image (a text) gives the `digest` of its content instead, so the
    split's class counts and its copies of train examples are still summed up.

    An image found unusable while listing (a record's bytes that do not decode) has a
    `problem` instead of facts; like a bad file, it is an error, or a warning under `skip_corrupt`.
    An image read in memory (a record's bytes) comes as `data`, inspected by `dsl.data_check`
    like a file, so that `--sample` leaves the unsampled ones alone.
    """

    label: int | None  # None: an example without a class (a sentence pair)
    origin: str  # for people: "train.csv line 17", "data_batch_1.bin record 5"
    where: Location  # where a problem with this example is reported
    path: str | None = None  # an image file still to inspect
    data: bytes | None = None  # an encoded image read already (a record's bytes), still to inspect
    facts: ImageFacts | None = None  # known already (records read in memory)
    problem: str | None = None  # why the image, read already, is unusable
    digest: bytes | None = None  # content digest of an example without an image (a text)
    words: list[str] | None = None  # a text's words as the vectorizer splits them
    pixels: dict[int, int] | None = None  # a mask's pixels per class


@dataclass(frozen=True)
class Problem:
    """A listing problem; with no `where`, it is reported at the split's YAML value (inputter.<mode>)."""

    message: str
    where: Location | None = None
    severity: str = "error"


@dataclass
class Split:
    """The data of one mode: the items (read lazily, so a large listing is never held whole)."""

    items: Iterable[Example | Problem]
    source: str  # what was read, for the summary: "data/train.csv", "5 .bin files"
    class_names: list[str] | None = None
    count: int | None = None  # examples that are generated, not listed (nothing to read)
    # An example is of one class (classification); False: of several (a detection image's boxes),
    # so the summary gives no examples per class (the details count the boxes per class).
    one_class_each: bool = True
    # More of the summary once the items are read, from the resolved pipeline (a detection
    # set's boxes per image and class, their sizes against the anchors).
    details: Callable[[dict[str, Any]], list[str]] | None = None
    # Warnings once the items are read, each at the pipeline path it is about ((path, message)):
    # a detection set's boxes that match none of the network's anchors, at network.anchors.
    warnings: Callable[[dict[str, Any]], list[tuple[tuple[str | int, ...], str]]] | None = None
    # Why the split was not read though its own files are fine: another split's errors stop it
    # (image_folder's val takes its classes from the train folders), said in its summary.
    waits_for: str | None = None
