"""`image_folder`: one sub-folder per class, as torchvision's ImageFolder and Keras expect.

    data/train/cat/0001.png
    data/train/dog/0002.jpg

Class indices follow the sorted sub-folder names of the train folder (or the `classes`
list, to fix the order), and are the same in every mode: a val folder may lack a class,
but not have one the train folder does not know.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    COMMON_PARAMS,
    FOLDER_NUM_CLASSES_PARAM,
    MODES,
    Listing,
    as_list,
    check_num_classes,
    existing_dir,
    files_under,
    folder_class_names,
    image_shape_param,
    skipped_outputs,
    source_params,
    sub_folders,
)
from dsl.inputters.files import IMAGE_EXTENSIONS
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register
from dsl.language.rules import one_per_class
from dsl.tasks.image_classification._host_files import folder_images

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a folder with one sub-folder of images per class", {"type": "string", "minLength": 1}),
    "num_classes": FOLDER_NUM_CLASSES_PARAM,
    "classes": {
        "description": (
            "Class sub-folder names in label order (label 0 first); null = the sorted sub-folder "
            "names of the train folder."
        ),
        "type": ["array", "null"],
        "items": {"type": "string", "minLength": 1},
        "minItems": 2,
        "uniqueItems": True,
        "default": None,
    },
    "image_shape": image_shape_param(),
    **COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """The examples of `mode` for `dslrun validate --data`, listed as `build` lists them."""
    from dsl.data_check.examples import Example, Problem, Split
    from dsl.language.diagnostics import Location

    source = ", ".join(as_list(params[mode]))
    try:
        dirs = [existing_dir(v, f"inputter.{mode}") for v in as_list(params[mode])]
        folders = _folders(params)
    except DslError as exc:
        own = str(exc).startswith(f"inputter.{mode}:")
        waits = None if own else f"its classes are the sub-folders of inputter.{next(m for m in MODES if params[m])}, see the error above"
        return Split([Problem(str(exc))], source=source, waits_for=waits)
    try:
        classes = _classes(params, folders)
        listing = _listing(mode, dirs, classes)
    except DslError as exc:
        return Split([Problem(str(exc))], source=source)
    items = (
        Example(label, path, Location(path), path=path) for path, label in zip(listing.paths, listing.labels)
    )
    return Split(items, source=", ".join(as_list(params[mode])), class_names=classes)


@register(
    "inputter",
    "image_folder",
    facts=folder_class_names,
    rules=[one_per_class("classes", "class names", "inputter")],
    params=PARAMS,
    outputs=skipped_outputs,
    examples=examples,
    batch=("image", "class"),
    host_files=folder_images,
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Images (PNG, JPEG, BMP, GIF) in one sub-folder per class (class index = sorted sub-folder names).

    List every declared folder now; images are read while training.
    """
    from dsl.inputters.pipeline import FileListInputter

    folders = _folders(params)
    classes = _classes(params, folders)
    listings = {mode: _listing(mode, dirs, classes) for mode, dirs in folders.items()}
    inputter = FileListInputter(params, listings, tuple(params["image_shape"]), params["num_classes"])
    inputter.class_names = classes
    return inputter


def _folders(p: dict[str, Any]) -> dict[str, list[Path]]:
    """The existing folders of each declared mode, in mode order."""
    folders = {mode: [existing_dir(v, f"inputter.{mode}") for v in as_list(p[mode])] for mode in MODES if p[mode]}
    if not folders:
        raise DslError("the image_folder inputter declares no data; set inputter.train (and val / test)")
    return folders


def _classes(p: dict[str, Any], folders: dict[str, list[Path]]) -> list[str]:
    """Class names in label order: `classes`, or the sorted sub-folders of the first mode's folder."""
    classes = list(p["classes"]) if p["classes"] else _class_folders(next(iter(folders.items())))
    check_num_classes(len(classes), p, "inputter.classes" if p["classes"] else "inputter.train",
                      f"there are {len(classes)} classes ({', '.join(classes[:5])}{', ...' if len(classes) > 5 else ''})")
    return classes


def _class_folders(mode_and_dirs: tuple[str, list[Path]]) -> list[str]:
    mode, dirs = mode_and_dirs
    names = sub_folders(dirs)
    if not names:
        raise DslError(f"inputter.{mode}: {dirs[0]} has no class sub-folders; expected one folder of images per class")
    return names


def _listing(mode: str, dirs: list[Path], classes: list[str]) -> Listing:
    key = f"inputter.{mode}"
    listing = Listing(key)
    index = {name: i for i, name in enumerate(classes)}
    for folder in dirs:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name not in index:
                raise DslError(
                    f"{key}: {folder} has a sub-folder {entry.name!r} that is not a known class "
                    f"({', '.join(classes[:5])}{', ...' if len(classes) > 5 else ''}); "
                    "remove it or add it to inputter.classes"
                )
            for path in files_under(Path(entry.path), IMAGE_EXTENSIONS):
                listing.add(path, index[entry.name])
    if not listing.paths:
        raise DslError(f"{key}: no {'/'.join(IMAGE_EXTENSIONS)} images under {', '.join(map(str, dirs))}")
    return listing
