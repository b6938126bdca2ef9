"""One split of the data summed up: counts, classes, sizes, channels, steps; and what looks wrong.

The warnings are about the data as a whole rather than one file: a class with no example
(never learnt, or never measured), classes far apart in size, and val or test examples
(image bytes, texts) that are also in train (the score then overstates what the model learnt).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dsl.data_check.examples import Example
from dsl.data_check.images import ImageFacts

# A split whose largest class has this many times the examples of its smallest is "imbalanced".
IMBALANCE = 10.0
_SHOWN = 5  # classes named in one message


@dataclass
class SplitReport:
    """What one split holds."""

    key: str  # "inputter.train"
    mode: str
    source: str = ""
    class_names: list[str] | None = None
    generated: int | None = None  # examples generated in memory (nothing read)
    one_class_each: bool = True  # Split.one_class_each
    examples: int = 0  # usable examples
    unusable: int = 0  # listed examples whose image is missing or bad
    labels: Counter[Any] = field(default_factory=Counter)
    sizes: Counter[tuple[int, int]] = field(default_factory=Counter)  # (width, height)
    modes: Counter[str] = field(default_factory=Counter)  # Pillow mode: RGB, L, RGBA, ...
    digests: dict[bytes, str] = field(default_factory=dict)  # content -> where it is first listed
    steps: int | None = None  # train: steps per epoch; val/test: batches per pass
    lengths: list[int] = field(default_factory=list)  # words per text
    words: Counter[str] = field(default_factory=Counter)  # word -> occurrences (texts)
    text: dict[str, Any] = field(default_factory=dict)  # dsl.data_check.text.text_facts
    pixels: Counter[int] = field(default_factory=Counter)  # masks: class -> pixels
    details: list[str] = field(default_factory=list)  # what the inputter adds (Split.details)
    # --sample: the images inspected out of those listed (sizes, modes and digests are the sample's)
    inspected: int | None = None
    listed: int = 0
    waits_for: str | None = None  # Split.waits_for

    def count(self, example: Example, facts: ImageFacts | None) -> None:
        """One usable example: its class, its image's size and mode (when it is an image) and
        its content's digest (to find val examples copied from train)."""
        self.examples += 1
        if example.label is not None:  # a sentence pair has no class
            self.labels[example.label] += 1
        if facts is not None:
            self.count_facts(facts, example.origin)
        if example.pixels is not None:
            self.pixels.update(example.pixels)
        if example.words is not None:
            self.lengths.append(len(example.words))
            self.words.update(example.words)
        if facts is None and example.digest is not None:
            self.digests.setdefault(example.digest, example.origin)

    def count_facts(self, facts: ImageFacts, origin: str = "") -> None:
        """One usable image's size, mode and content digest."""
        self.sizes[(facts.width, facts.height)] += 1
        self.modes[facts.mode] += 1
        self.digests.setdefault(facts.digest, origin)

    def uncount(self, example: Example) -> None:
        """Take back an example counted as usable before its image was found unusable (--sample)."""
        self.examples -= 1
        if example.label is not None:
            self.labels[example.label] -= 1

    def class_name(self, label: int) -> str:
        if self.class_names and 0 <= label < len(self.class_names):
            return f"{label} ({self.class_names[label]})"
        return str(label)

    def summary(self, inputter: dict[str, Any], world_size: int, batch_size: int | None = None) -> str:
        """One line: `inputter.train: 2000 examples from train.csv; 10 classes, 180-220 each; 32x32 RGB; 31 steps ...`."""
        batch = f"batch {batch_size or inputter['batch_size']} x {world_size} process{'es' * (world_size != 1)}"
        unit = ("step" if self.steps == 1 else "steps") + " per epoch" if self.mode == "train" else \
            ("batch" if self.steps == 1 else "batches") + " per pass"
        if self.generated is not None:
            return f"{self.key}: {self.generated} examples {self.source}; {self.steps} {unit} ({batch})"
        if not self.examples and not self.unusable and self.waits_for:
            return f"{self.key}: {self.source} not read: {self.waits_for}"
        if not self.examples and not self.unusable:
            return f"{self.key}: nothing read from {self.source} (see the errors above)"
        parts = [f"{self.key}: {self.examples} examples from {self.source}"]
        if self.unusable:
            parts[0] += f", {self.unusable} more unusable"
        if self.pixels:
            parts.append(f"pixels per class: {_shares(self)}")
        elif self.labels and not self.one_class_each:
            found = len(self.class_names or self.labels)
            declared = inputter.get("num_classes")
            parts.append(f"{found} classes" + (f" (inputter.num_classes is {declared})"
                                               if isinstance(declared, int) and declared != found else ""))
        elif self.labels:
            low, high = min(self.labels.values()), max(self.labels.values())
            parts.append(f"{len(self.labels)} classes, {low}-{high} each" if low != high else
                         f"{len(self.labels)} classes, {low} each")
        if self.inspected is not None:
            from dsl.data_check.sample import promise

            parts[0] += f" ({promise(self.inspected, self.listed)})"
        if self.sizes:
            parts.append(f"{_sizes(self.sizes)} {_counted(self.modes)}")
            height, width, channels = inputter.get("image_shape") or (None, None, None)
            if height and (set(self.sizes) != {(width, height)} or set(self.modes) != {"L" if channels == 1 else "RGB"}):
                parts[-1] += f" (fed as {height}x{width}x{channels})"
        if self.text:
            from dsl.data_check.text import describe

            parts.append(describe(self.text, inputter))
        parts.append(f"{self.steps} {unit} ({batch})")
        return "; ".join(parts + self.details)

    def to_dict(self) -> dict[str, Any]:
        return {
            "split": self.key,
            "source": self.source,
            "examples": self.generated if self.generated is not None else self.examples,
            "unusable": self.unusable,
            "classes": {str(label): count for label, count in sorted(self.labels.items())},
            "sizes": {f"{w}x{h}": count for (w, h), count in self.sizes.most_common()},
            "modes": dict(self.modes.most_common()),
            "steps": self.steps,
            **({"inspected": self.inspected} if self.inspected is not None else {}),
            **({"text": self.text} if self.text else {}),
            **({"pixels": {str(k): count for k, count in sorted(self.pixels.items())}} if self.pixels else {}),
            **({"details": list(self.details)} if self.details else {}),
        }


def steps(report: SplitReport, inputter: dict[str, Any], world_size: int, batch_size: int | None = None) -> int:
    """Train steps per epoch (as the runner counts them), or batches per val/test pass on rank 0,
    with `batch_size` per replica (dsl.distributed.scaling; None: inputter.batch_size)."""
    from dsl.distributed.scaling import steps_per_epoch

    if report.generated is not None:
        count = report.generated
    else:
        count = report.examples + (0 if inputter.get("skip_corrupt") else report.unusable)
    batch = batch_size or inputter["batch_size"]
    if report.mode == "train":
        return steps_per_epoch(count, batch, world_size, inputter.get("drop_remainder", True)) or 0
    return math.ceil(math.ceil(count / world_size) / batch)


def split_warnings(report: SplitReport, train: SplitReport | None, num_classes: int | None) -> list[tuple[str, str]]:
    """(message, severity) for what looks wrong with the split as a whole."""
    if report.generated is not None or not report.examples:
        return []
    found = []
    if num_classes:
        empty = [label for label in range(num_classes) if not report.labels[label]]
        if empty:
            names = ", ".join(report.class_name(label) for label in empty[:_SHOWN]) + (", ..." if len(empty) > _SHOWN else "")
            one = len(empty) == 1
            which = f"class {names} has" if one else f"{len(empty)} of {num_classes} classes have"
            what = (f"the model cannot learn {'it' if one else 'them'}" if report.mode == "train"
                    else f"{'its' if one else 'their'} accuracy is never measured")
            listed = "" if one else f" ({names})"
            found.append((f"{which} no example in this split{listed}: {what}; add examples or check the labels",
                          "warning"))
    if report.pixels:
        found += _pixel_imbalance(report)
    elif len(report.labels) > 1:
        (big, most), (small, fewest) = report.labels.most_common()[0], report.labels.most_common()[-1]
        if most >= IMBALANCE * fewest:
            found.append((f"the classes are heavily imbalanced: class {report.class_name(big)} has {most} examples, "
                          f"class {report.class_name(small)} {fewest} ({most / fewest:.0f}x fewer); balance them or "
                          "expect the small classes to be learnt poorly", "warning"))
    if train is not None and report is not train:
        shared = [digest for digest in report.digests if digest in train.digests]
        if shared:
            first = shared[0]
            one = len(shared) == 1
            kind = "image" if report.sizes else "example"
            among = f"{report.inspected} sampled" if report.inspected is not None else str(report.examples)
            found.append((f"{len(shared)} of {among} {kind}s {'has' if one else 'have'} the same content as "
                          f"a train {kind} ({'' if one else 'e.g. '}{report.digests[first]} = {train.digests[first]}), "
                          f"so the {report.mode} score overstates what the model learnt; remove "
                          f"{'it' if one else 'them'} from one of the splits", "warning"))
    return found


def _sizes(sizes: Counter[tuple[int, int]]) -> str:
    if len(sizes) == 1:
        (width, height), = sizes
        return f"{width}x{height}"
    areas = sorted(sizes, key=lambda s: s[0] * s[1])
    return f"{len(sizes)} sizes from {areas[0][0]}x{areas[0][1]} to {areas[-1][0]}x{areas[-1][1]}"


def _counted(counter: Counter[str]) -> str:
    if len(counter) == 1:
        return str(next(iter(counter)))
    return ", ".join(f"{name} {count}" for name, count in counter.most_common())


# Masks: the largest class may cover this many times the pixels of the smallest before a warning
# (a background usually covers most of an image, so far more than `IMBALANCE`).
PIXEL_IMBALANCE = 50.0


def _shares(report: SplitReport) -> str:
    """`0 (background) 78.1%, 1 (disc) 7.2%, ...`: each class's share of the split's counted pixels."""
    total = sum(report.pixels.values())
    return ", ".join(f"{report.class_name(k)} {count / total:.1%}" for k, count in sorted(report.pixels.items()))


def _pixel_imbalance(report: SplitReport) -> list[tuple[str, str]]:
    """A warning when one class covers far more pixels than another (per pixel, not per image)."""
    if len(report.pixels) < 2:
        return []
    (big, most), (small, fewest) = report.pixels.most_common()[0], report.pixels.most_common()[-1]
    if most < PIXEL_IMBALANCE * fewest:
        return []
    return [(f"the classes' pixels are heavily imbalanced: class {report.class_name(big)} covers {most} pixels, "
             f"class {report.class_name(small)} {fewest} ({most / fewest:.0f}x fewer); expect the small class to be "
             "learnt poorly, or weigh it up with modeler.class_weights", "warning")]
