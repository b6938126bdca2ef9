"""`text_folder`: one sub-folder of `.txt` files per class, as IMDB's `aclImdb/train/{neg,pos}`.

    aclImdb/train/neg/0_3.txt
    aclImdb/train/pos/0_9.txt

Each file is one text (UTF-8). Class indices follow the sorted sub-folder names of the
train folder, as `image_folder`'s do; `classes` fixes the order and reads only those
sub-folders (`[neg, pos]` leaves IMDB's unlabelled `unsup` out). A separate type from
`text_classification_csv` because the two share no source setting: the vocabulary, the
pipeline and the checks are shared (`dsl.tasks.text_classification._text`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.engine.contracts import Inputter
from dsl.inputters.common import (
    FOLDER_NUM_CLASSES_PARAM,
    MODES,
    as_list,
    check_num_classes,
    existing_dir,
    files_under,
    folder_class_names,
    source_params,
    sub_folders,
)
from dsl.inputters.text_files import decoded
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register, with_defaults
from dsl.language.rules import one_per_class
from dsl.tasks.text_classification._text import (
    CLASSES_PARAM,
    TEXT_COMMON_PARAMS,
    VOCABULARY_PARAMS,
    TextSplit,
)

TEXT_EXTENSION = ".txt"

PARAMS: dict[str, dict[str, Any]] = {
    **source_params("a folder with one sub-folder of .txt files per class", {"type": "string", "minLength": 1}),
    "num_classes": FOLDER_NUM_CLASSES_PARAM,
    "classes": {
        **CLASSES_PARAM,
        "description": (
            "Class sub-folder names in label order (label 0 first); only these sub-folders are read. "
            "null = every sub-folder of the train folder, sorted."
        ),
    },
    **VOCABULARY_PARAMS,
    **TEXT_COMMON_PARAMS,
}


def examples(params: dict[str, Any], mode: str) -> Any:
    """`dslrun validate --data`: the texts of `mode`'s folders as `build` lists them (class and
    digest each), each unreadable one a problem naming its file."""
    from dsl.data_check.examples import Example, Problem, Split
    from dsl.language.diagnostics import Location
    from dsl.tasks.text_classification._text import text_digest, words

    p = with_defaults(params, PARAMS)
    source = ", ".join(as_list(p[mode]))
    try:
        folders = {m: [existing_dir(v, f"inputter.{m}") for v in as_list(p[m])] for m in MODES if p[m]}
        classes = _classes(p, folders)
        files = _listing(mode, folders[mode], classes, explicit=bool(p["classes"]))
    except DslError as exc:
        return Split([Problem(str(exc))], source=source)
    items: list[Any] = []
    for path, label in files:
        try:
            text = decoded(path.read_bytes(), path)
        except (OSError, DslError) as exc:
            items.append(Problem(str(exc) if isinstance(exc, DslError) else f"cannot read {path}: {exc}",
                                 Location(str(path))))
            continue
        items.append(Example(label, str(path), Location(str(path)), digest=text_digest(text),
                                     words=words(text, p["standardize"])))
    return Split(items, source=source, class_names=classes)


@register(
    "inputter",
    "text_folder",
    facts=folder_class_names,
    rules=[one_per_class("classes", "class names", "inputter")],
    params=PARAMS,
    examples=examples,
    batch=("tokens", "class"),
)
def build(params: dict[str, Any], context: BuildContext) -> Inputter:
    """Texts as .txt files in one sub-folder per class (IMDB's layout); a vocabulary built from the train split.

    Read every text of every declared folder now (errors name the file), then vectorise.
    """
    from dsl.tasks.text_classification._text_pipeline import TextInputter

    folders = {mode: [existing_dir(v, f"inputter.{mode}") for v in as_list(params[mode])] for mode in MODES if params[mode]}
    if not folders:
        raise DslError("the text_folder inputter declares no data; set inputter.train (and val / test)")
    classes = _classes(params, folders)
    splits = {}
    for mode, dirs in folders.items():
        split = TextSplit(f"inputter.{mode}")
        for path, label in _listing(mode, dirs, classes, explicit=bool(params["classes"])):
            try:
                split.add(decoded(path.read_bytes(), path), label)
            except OSError as exc:
                raise DslError(f"{split.key}: cannot read {path}: {exc.strerror or exc}") from None
        splits[mode] = split
    return TextInputter(params, splits, context, classes)


def _classes(p: dict[str, Any], folders: dict[str, list[Path]]) -> list[str]:
    """Class names in label order: `classes`, or the sorted sub-folders of the first mode's folders."""
    classes = list(p["classes"]) if p["classes"] else _class_folders(*next(iter(folders.items())))
    check_num_classes(len(classes), p, "inputter.classes" if p["classes"] else "inputter.train",
                      f"there are {len(classes)} classes ({_shown(classes)})")
    return classes


def _listing(mode: str, dirs: list[Path], classes: list[str], explicit: bool) -> list[tuple[Path, int]]:
    """(file, label) of the texts under `dirs`, class by class, files in sorted order. Without
    `explicit` classes, a sub-folder that is no known class is an error (a val class train lacks)."""
    key = f"inputter.{mode}"
    index = {name: i for i, name in enumerate(classes)}
    files = []
    for folder in dirs:
        names = sub_folders([folder])
        unknown = [name for name in names if name not in index]
        if unknown and not explicit:
            raise DslError(f"{key}: {folder} has a sub-folder {unknown[0]!r} that is not a known class "
                           f"({_shown(classes)}); remove it, or list the classes to read in inputter.classes")
        for name in (name for name in names if name in index):
            files += [(Path(path), index[name]) for path in files_under(folder / name, (TEXT_EXTENSION,))]
    if not files:
        raise DslError(f"{key}: no {TEXT_EXTENSION} files in the class sub-folders ({_shown(classes)}) of "
                       f"{', '.join(map(str, dirs))}")
    return files


def _class_folders(mode: str, dirs: list[Path]) -> list[str]:
    names = sub_folders(dirs)
    if not names:
        raise DslError(f"inputter.{mode}: {dirs[0]} has no class sub-folders; expected one folder of .txt files per class")
    return names


def _shown(classes: list[str]) -> str:
    return ", ".join(classes[:5]) + (", ..." if len(classes) > 5 else "")
