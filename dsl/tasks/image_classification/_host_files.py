"""What a host of `dslrun doctor --hosts` must read beyond an inputter's sources: a sample of the
images a CSV or a folder lists, and a binary set's batch files.

Each inputter of this task names its function as `host_files=` when it registers. Pure Python.
"""

from __future__ import annotations

import os
from typing import Any

from dsl.inputters.files import IMAGE_EXTENSIONS
from dsl.tasks.image_classification._cifar10_format import BINARY_FOLDER, TEST_FILES, TRAIN_FILES

SAMPLES_PER_CSV = 3  # the first, middle and last image: a wrong folder shows at once, a partial copy often


def _sources(section: dict[str, Any], cwd: str) -> list[str]:
    found = []
    for mode in ("train", "val", "test"):
        value = section.get(mode)
        for path in value if isinstance(value, list) else [value] if value is not None else []:
            found.append(os.path.normpath(os.path.join(cwd, os.path.expanduser(str(path)))))
    return found


def csv_images(section: dict[str, Any], cwd: str) -> list[tuple[str, str]]:
    """A sample of the images each listing CSV names."""
    return [(image, "file") for path in _sources(section, cwd) if os.path.isfile(path) for image in csv_samples(path)]


def folder_images(section: dict[str, Any], cwd: str) -> list[tuple[str, str]]:
    """An image of each of the first class folders of each source folder."""
    return [(image, "file") for path in _sources(section, cwd) if os.path.isdir(path) for image in folder_samples(path)]


def binary_batches(section: dict[str, Any], cwd: str) -> list[tuple[str, str]]:
    """The data directory and every batch file cifar10_binary reads."""
    if not section.get("data_dir"):
        return []
    data_dir = os.path.normpath(os.path.join(cwd, os.path.expanduser(str(section["data_dir"]))))
    return [(item["path"], item["kind"]) for item in cifar10_items(data_dir)]


def csv_samples(csv_path: str, count: int = SAMPLES_PER_CSV) -> list[str]:
    """The first, middle and last images a CSV lists (read here; none when it is unreadable here)."""
    import csv

    rows: list[str] = []
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            for row in csv.reader(handle):
                if len(row) == 2 and row[0].strip() and row[1].strip().lstrip("-").isdigit():
                    rows.append(row[0].strip())
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    if not rows:
        return []
    picks = sorted({0, len(rows) // 2, len(rows) - 1})[:count]
    folder = os.path.dirname(csv_path)
    return [os.path.normpath(os.path.join(folder, rows[i])) for i in picks]


def folder_samples(folder: str, count: int = SAMPLES_PER_CSV) -> list[str]:
    picks = []
    try:
        classes = sorted(entry.path for entry in os.scandir(folder) if entry.is_dir())
        for class_folder in classes[:count]:
            images = sorted(entry.path for entry in os.scandir(class_folder)
                            if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS))
            picks += images[:1]
    except OSError:
        return []
    return picks


def cifar10_items(data_dir: str) -> list[dict[str, str]]:
    folder = os.path.join(data_dir, BINARY_FOLDER) if os.path.isdir(os.path.join(data_dir, BINARY_FOLDER)) else data_dir
    return [{"path": data_dir, "kind": "dir"}] + [{"path": os.path.join(folder, name), "kind": "file"}
                                                  for name in (*TRAIN_FILES, *TEST_FILES)]
