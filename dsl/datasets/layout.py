"""The on-disk layout `dslrun data` writes, and how a run marks it complete.

    DIR/train/00000.png ...      DIR/eval/00000.png ...
    DIR/eval.csv                 rows `eval/00000.png,3` after a `path,label` header
                                 (segmentation: `eval/images/00000.png,eval/masks/00000.png`
                                 after an `image_path,mask_path` header)
    DIR/classes.txt              class names, one per line, label 0 first (data with classes)
    DIR/dataset.json             what was generated (kind and settings)
    DIR/train.csv                written last

A directory is complete when train.csv, eval.csv and dataset.json exist and dataset.json
describes the requested data. Every run first deletes those three files and writes them
back at the very end, each via a temporary file and a rename, so an interrupted run is
never mistaken for a complete one (a Makefile rule on DIR/train.csv stays correct too).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

TRAIN_CSV = "train.csv"
EVAL_CSV = "eval.csv"
MANIFEST = "dataset.json"
CLASSES = "classes.txt"


@dataclass(frozen=True)
class SetSpec:
    """What a generator writes: a train and an eval split of `num_classes` classes, drawn from
    `seed`. Also the manifest that tells a complete directory from another; a generator's spec
    adds its own settings (an image size) as fields of a subclass."""

    num_train: int = 400
    num_val: int = 100
    num_classes: int = 3
    seed: int = 0


# `split(name, count, stream)`: write one split's files, return its CSV rows.
SplitWriter = Callable[[str, int, int], Sequence[Sequence[Any]]]


def write_set(out: Path, kind: str, spec: SetSpec, force: bool, split: SplitWriter, class_names: list[str], *,
              header: Sequence[str] = ("path", "label"), lineterminator: str = "\n",
              also: Sequence[str] = ()) -> tuple[bool, dict[str, int]]:
    """Generate `spec` into `out` unless `out` holds it already (its dataset.json says this `kind`
    and `spec`, and the files `also` names exist); returns (written, counts per split).

    Each split is written by `split` (train as stream 0, eval as stream 1, so the two differ
    whatever the seed); then `finish` writes the listings, train.csv last.
    """
    manifest = {"kind": kind, **asdict(spec)}
    counts = {"train": spec.num_train, "eval": spec.num_val}
    if not force and is_complete(out, manifest) and all((out / name).is_file() for name in also):
        return False, counts
    begin(out)
    rows = {name: split(name, count, stream) for stream, (name, count) in enumerate(counts.items())}
    finish(out, rows, class_names, manifest, header, lineterminator)
    return True, counts


def is_complete(out: Path, manifest: dict[str, Any]) -> bool:
    """Whether `out` already holds the data `manifest` describes (its manifest may say more)."""
    try:
        found = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    same = isinstance(found, dict) and all(found.get(key) == value for key, value in manifest.items())
    return same and (out / TRAIN_CSV).is_file() and (out / EVAL_CSV).is_file()


def begin(out: Path) -> None:
    """Create `out` and mark it incomplete until `finish` runs."""
    out.mkdir(parents=True, exist_ok=True)
    for name in (TRAIN_CSV, MANIFEST, EVAL_CSV):
        (out / name).unlink(missing_ok=True)


def write_images(out: Path, split: str, images: np.ndarray, start: int = 0, total: int | None = None) -> list[str]:
    """uint8 images (N, H, W, C) as PNGs DIR/<split>/<index>.png; returns their paths relative to `out`."""
    from PIL import Image

    folder = out / split
    folder.mkdir(parents=True, exist_ok=True)
    width = max(5, len(str((total or start + len(images)) - 1)))
    paths = []
    for offset, pixels in enumerate(images):
        name = f"{split}/{start + offset:0{width}d}.png"
        Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(out / name, format="PNG")
        paths.append(name)
    return paths


def finish(out: Path, rows: Mapping[str, Sequence[Sequence[Any]]], class_names: list[str], manifest: dict[str, Any],
           header: Sequence[str] = ("path", "label"), lineterminator: str = "\n") -> None:
    """Write classes.txt (when the data has classes: `class_names` not empty), eval.csv,
    dataset.json and, last, train.csv (rows under `header`)."""
    if class_names:
        atomic_text(out / CLASSES, "".join(f"{name}\n" for name in class_names))
    _write_csv(out / EVAL_CSV, rows["eval"], header, lineterminator)
    atomic_text(out / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    _write_csv(out / TRAIN_CSV, rows["train"], header, lineterminator)


def _write_csv(path: Path, rows: Iterable[Sequence[Any]], header: Sequence[str], lineterminator: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator=lineterminator)
        writer.writerow(header)
        writer.writerows([int(value) if isinstance(value, np.integer) else value for value in row] for row in rows)
    os.replace(temporary, path)


def atomic_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: never half a file."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    os.replace(temporary, path)


def class_folders(source: Path, out: Path) -> Path:
    """The images of a `path,label` layout (train.csv, eval.csv) as links in class folders,
    `out/{train,val}/class_NN/`: the layout `image_folder` reads, without copying an image."""
    for split, listing in (("train", "train.csv"), ("val", "eval.csv")):
        with (source / listing).open(newline="") as rows:
            for path, label in list(csv.reader(rows))[1:]:
                target = out / split / f"class_{int(label):02d}" / Path(path).name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source / path)
    return out
