"""`dslrun validate --data --sample N`: inspect N images drawn at random instead of every one.

Reading every image header of ImageNet's 1.28 million takes minutes (docs/benchmarks.md, "Cost
of scale: data"); a user about to launch wants an answer in seconds, and one with known odds.
So every row is still listed — its format and label checked, its class counted, exactly —
and only the image files are sampled: N of them, uniform over the split. The report then
says what the sample can promise: the smallest share of unusable images it finds with 95 %
probability.

The split is read once, lazily, without knowing its length first, so the sample is a
reservoir (Vitter's algorithm R) with a fixed seed: two runs on the same data inspect the
same images. An image already read in memory (a TFRecord's bytes) is inspected when it
enters the reservoir, so the reservoir holds facts, not megabytes of images; a file is
inspected once the split is read, so only the N kept are opened.
"""

from __future__ import annotations

import dataclasses
import math
import random

from dsl.data_check.examples import Example
from dsl.data_check.images import inspect_bytes

CONFIDENCE = 0.95
SEED = 20_251_128


class Reservoir:
    """A uniform random sample of at most `size` examples of a stream of unknown length."""

    def __init__(self, size: int, seed: int = SEED) -> None:
        self.size = size
        self.seen = 0
        self.items: list[Example] = []
        self._random = random.Random(seed)

    def offer(self, example: Example) -> None:
        """Consider one example; it is kept with probability size / examples seen so far."""
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(_light(example))
            return
        slot = self._random.randrange(self.seen)
        if slot < self.size:
            self.items[slot] = _light(example)


def _light(example: Example) -> Example:
    """The example with its in-memory image replaced by the image's facts (or its problem)."""
    if example.data is None:
        return example
    facts = inspect_bytes(example.data)
    if isinstance(facts, str):
        return dataclasses.replace(example, data=None, problem=f"{example.origin}: the image is {facts}")
    return dataclasses.replace(example, data=None, facts=facts)


def smallest_share_found(inspected: int, total: int, confidence: float = CONFIDENCE) -> float:
    """The smallest share of unusable images that `inspected` random draws out of `total` find
    at least once with probability `confidence` (draws without replacement; 0.0 when every
    image was inspected)."""
    if inspected >= total:
        return 0.0
    # P(no bad image in the sample) for K bad of N is the hypergeometric C(N-K, n) / C(N, n);
    # find the smallest K that makes it at most 1 - confidence.
    low, high = 1, total
    while low < high:
        bad = (low + high) // 2
        if _miss_probability(inspected, total, bad) <= 1 - confidence:
            high = bad
        else:
            low = bad + 1
    return low / total


def _miss_probability(inspected: int, total: int, bad: int) -> float:
    """The probability that `inspected` draws without replacement out of `total` miss all `bad`."""
    if inspected > total - bad:
        return 0.0
    return math.exp(
        math.lgamma(total - bad + 1) - math.lgamma(total - bad - inspected + 1)
        - math.lgamma(total + 1) + math.lgamma(total - inspected + 1)
    )


def promise(inspected: int, total: int) -> str:
    """What a sample of `inspected` images out of `total` found nothing beyond, for the summary."""
    share = smallest_share_found(inspected, total)
    return (f"{inspected} of {total} images inspected, drawn at random: a fault in {_percent(share)} of the images "
            f"(~{round(share * total)}) or more is found with {CONFIDENCE:.0%} probability")


def _percent(share: float) -> str:
    digits = max(0, -math.floor(math.log10(share * 100)) + 1) if share > 0 else 0
    return f"{share * 100:.{min(digits, 4)}f} %"
