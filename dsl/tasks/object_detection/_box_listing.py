"""The images and boxes of a detection data set, listed in Python: box CSVs and COCO JSON files.

TensorFlow-free: the detection inputters build from it, and `dslrun validate --data` lists
the same examples with it. Every box is checked where it is written, so a bad one is
reported with the CSV file and line, or the JSON file and annotation id: coordinates that
are not numbers, `min >= max`, a box reaching outside its image, an unknown label. Image
sizes come from the COCO `images` entries, or (CSV) from the image file's header (Pillow,
no decoding).

Boxes are kept normalised, `[y_min, x_min, y_max, x_max]` in [0, 1] of the image (the
order of `tf.image.combined_non_max_suppression` and the TF Object Detection API), so
resizing an image to the pipeline's `image_shape` leaves them unchanged.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsl.inputters.common import data_rows
from dsl.language.suggest import did_you_mean

BOX_COLUMNS = ("image_path", "x_min", "y_min", "x_max", "y_max", "label")


@dataclass(frozen=True)
class BoxProblem:
    """A bad row or annotation: the file, the line (0 when the file has no lines to name), what is wrong."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file} line {self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass
class ImageBoxes:
    """One image and its boxes: normalised [y_min, x_min, y_max, x_max] and class indices."""

    path: str
    origin: str  # "train.csv line 2", "train.json image id 7"
    file: str  # the listing file and line it is first named at
    line: int
    size: tuple[int, int] = (0, 0)  # (width, height) in pixels
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    crowd: int = 0  # iscrowd annotations left out of training and scoring


def class_index(label: str, classes: list[str] | None, num_classes: int) -> int | str:
    """`label` (an index, or a name of `classes`) as a class index, or why it is none."""
    text = label.strip()
    if classes and text in classes:
        return classes.index(text)
    try:
        index = int(text)
    except ValueError:
        known = f"one of {', '.join(classes)}" if classes else "a class index (or set inputter.classes to use names)"
        return f"unknown label {text!r}; expected {known}{did_you_mean(text, classes or [])}"
    if not 0 <= index < num_classes:
        return f"label {index} is outside 0..{num_classes - 1}; fix the row or inputter.num_classes"
    return index


def box_problem(x_min: float, y_min: float, x_max: float, y_max: float, size: tuple[int, int]) -> str | None:
    """Why a pixel box cannot be trained on, or None."""
    width, height = size
    if x_min >= x_max or y_min >= y_max:
        message = f"box ({x_min:g}, {y_min:g}, {x_max:g}, {y_max:g}) has min >= max; expected x_min < x_max and y_min < y_max"
        if x_max > 0 and y_max > 0 and x_min + x_max <= width and y_min + y_max <= height:
            # The usual slip (trial A10): COCO-style x, y, width, height columns under x_max, y_max.
            message += (f" (if the columns are x, y, width, height, write x_max = x + width and y_max = y + height: "
                        f"{x_min + x_max:g}, {y_min + y_max:g})")
        return message
    if x_min < 0 or y_min < 0 or x_max > width or y_max > height:
        return (f"box ({x_min:g}, {y_min:g}, {x_max:g}, {y_max:g}) reaches outside its {width}x{height} image; "
                "coordinates are pixels, 0 <= x <= width, 0 <= y <= height")
    return None


def normalised(x_min: float, y_min: float, x_max: float, y_max: float,
               size: tuple[int, int]) -> tuple[float, float, float, float]:
    width, height = size
    return (y_min / height, x_min / width, y_max / height, x_max / width)


# ------------------------------------------------------------------------------ CSV
def csv_images(csv_path: Path, params: dict[str, Any]) -> Iterator[ImageBoxes | BoxProblem]:
    """Every image of a box CSV (rows grouped by image, in the order first named) and every bad row."""
    images: dict[str, ImageBoxes] = {}
    problems: list[BoxProblem] = []
    order = _header_order(csv_path)
    if isinstance(order, BoxProblem):
        yield order
        return
    rows = _rows(csv_path)
    for line, row in rows:
        if order is not None and len(row) == len(order):
            row = [row[index] for index in order]
        found = _csv_row(csv_path, line, row, images, params)
        if isinstance(found, BoxProblem):
            problems.append(found)
    yield from problems
    yield from images.values()


def _rows(csv_path: Path) -> Iterator[tuple[int, list[str]]]:
    return data_rows(csv_path, _is_header)


# What a header may call each column (lower case, without `_`, `-` and spaces): a header is read by
# its names, so `image_path,y_min,x_min,...` is not read as x first (a trial's boxes came out transposed).
_NAMES = {
    "image_path": {"imagepath", "image", "path", "filename", "file", "imagefile", "imagename", "img"},
    "x_min": {"xmin", "x1", "left", "x0"},
    "y_min": {"ymin", "y1", "top", "y0"},
    "x_max": {"xmax", "x2", "right"},
    "y_max": {"ymax", "y2", "bottom"},
    "label": {"label", "class", "classname", "category", "categoryname", "name", "labelname"},
}


def _header_order(csv_path: Path) -> list[int] | BoxProblem | None:
    """Where each column of BOX_COLUMNS stands in the file's header (None: no header, or that order);
    a problem at the header when a name is none of them or two names are one column."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            first = next(((number, row) for number, row in enumerate(csv.reader(handle), start=1)
                          if any(cell.strip() for cell in row)), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # reading the rows says why
    if first is None or not _is_header(first[1]):
        return None
    line, header = first
    found: dict[str, int] = {}
    for index, cell in enumerate(header):
        key = re.sub(r"[\s_-]", "", cell.strip().lower())
        role = next((name for name, spellings in _NAMES.items() if key in spellings), None)
        if role is None or role in found:
            why = "names none of them" if role is None else f"names {role} again"
            return BoxProblem(str(csv_path), line, f"header column {index + 1} {cell.strip()!r} {why}: the columns are "
                                                   f"`{','.join(BOX_COLUMNS)}`, in any order, under these names (or "
                                                   "xmin, ymin, xmax, ymax, filename, class)")
        found[role] = index
    order = [found[name] for name in BOX_COLUMNS]
    return None if order == list(range(len(BOX_COLUMNS))) else order


def _is_header(row: list[str]) -> bool:
    """A first row whose four coordinates are all words, not numbers, names the columns, whatever it
    calls them (`filename,xmin,ymin,xmax,ymax,class` too): it was read as a box of an image named
    "filename". An image without boxes leaves them empty, a data row has numbers."""
    cells = [cell.strip() for cell in row]
    if len(cells) != len(BOX_COLUMNS):
        return cells == list(BOX_COLUMNS)
    return all(cell and not _number(cell) for cell in cells[1:5])


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_row(csv_path: Path, line: int, row: list[str], images: dict[str, ImageBoxes],
             params: dict[str, Any]) -> BoxProblem | None:
    """Add one row's box to its image (creating the image at its first row); the row's problem, or None."""
    where = str(csv_path)
    if len(row) != len(BOX_COLUMNS):
        return BoxProblem(where, line, f"expected {len(BOX_COLUMNS)} columns `{','.join(BOX_COLUMNS)}`, "
                                       f"found {len(row)}: {','.join(row)[:80]}")
    cells = [cell.strip() for cell in row]
    if not cells[0]:
        return BoxProblem(where, line, "the image path is empty")
    path = os.path.normpath(os.path.join(csv_path.parent, cells[0]))
    image = images.get(path)
    if image is None:
        size = _image_size(path)
        if isinstance(size, str):
            return BoxProblem(where, line, f"image {path} {size}; fix the row or the file")
        image = images[path] = ImageBoxes(path, f"{csv_path.name} line {line}", where, line, size)
    if not any(cells[1:]):
        return None  # an image without boxes
    try:
        x_min, y_min, x_max, y_max = (float(cell) for cell in cells[1:5])
    except ValueError:
        return BoxProblem(where, line, f"box coordinates {','.join(cells[1:5])} are not all numbers; "
                                       "write pixel coordinates, or leave all five box fields empty for an image without boxes")
    label = class_index(cells[5], params.get("classes"), params["num_classes"])
    problem = label if isinstance(label, str) else box_problem(x_min, y_min, x_max, y_max, image.size)
    if problem:
        return BoxProblem(where, line, problem)
    return _add(image, (x_min, y_min, x_max, y_max), int(label), params, BoxProblem(where, line, ""))


def _add(image: ImageBoxes, box: tuple[float, float, float, float], label: int, params: dict[str, Any],
         at: BoxProblem) -> BoxProblem | None:
    if len(image.boxes) >= params["max_boxes"]:
        # Worded the same for every image when a line names it, so that `validate --data` says it once
        # with a count (trial A16 read 42 lines of it, one per image).
        which = f"image {image.path}" if not at.line else "the image of this row"
        return BoxProblem(at.file, at.line, f"{which} has more than inputter.max_boxes ({params['max_boxes']}) boxes; "
                                            "raise max_boxes")
    image.boxes.append(normalised(*box, image.size))
    image.labels.append(label)
    return None


def _image_size(path: str) -> tuple[int, int] | str:
    """(width, height) from the image's header, or why it cannot be read."""
    from PIL import Image

    if not os.path.isfile(path):
        return "does not exist"
    try:
        with Image.open(path) as opened:
            return (int(opened.size[0]), int(opened.size[1]))
    except Exception as exc:  # any decoder failure means the file is bad
        return f"cannot be read ({type(exc).__name__}: {exc})"


# ------------------------------------------------------------------------------ COCO
def coco_images(json_path: Path, image_dir: Path, params: dict[str, Any]) -> Iterator[ImageBoxes | BoxProblem | str]:
    """Every image of a COCO annotations file and every bad annotation (named by its id); a string for
    a disagreement with the pipeline's `num_classes` or `classes` (reported at that key).

    Categories map to contiguous class indices in the order of their ids; `iscrowd`
    annotations are counted but left out.
    """
    where = str(json_path)
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        yield BoxProblem(where, 0, f"cannot read COCO annotations: {exc}; expected a JSON object with images, "
                                   "annotations and categories")
        return
    if not isinstance(data, dict) or not all(isinstance(data.get(key), list) for key in ("images", "annotations", "categories")):
        yield BoxProblem(where, 0, "not COCO annotations: expected a JSON object with lists images, annotations and categories")
        return
    named = sorted((c for c in data["categories"] if isinstance(c, dict) and "id" in c), key=lambda c: c["id"])
    categories = [c["id"] for c in named]
    index = {category: k for k, category in enumerate(categories)}
    if len(categories) != params["num_classes"]:
        yield (f"inputter.num_classes: {params['num_classes']}, but {json_path} has {len(categories)} categories; "
               "make them agree (a class per category, in the order of their ids)")
    misplaced = _misplaced_names(params.get("classes"), [str(c.get("name", c["id"])) for c in named])
    if misplaced:
        yield f"inputter.classes: {misplaced} in {json_path}"
    images: dict[Any, ImageBoxes] = {}
    for entry in data["images"]:
        try:
            path = os.path.normpath(os.path.join(image_dir, entry["file_name"]))
            images[entry["id"]] = ImageBoxes(path, f"{json_path.name} image id {entry['id']}", where, 0,
                                             (int(entry["width"]), int(entry["height"])))
        except (KeyError, TypeError, ValueError):
            yield BoxProblem(where, 0, f"image entry {str(entry)[:80]} lacks id, file_name, width or height")
    for annotation in data["annotations"]:
        problem = _coco_annotation(annotation, images, index, params, where)
        if problem:
            yield problem
    yield from images.values()


def _misplaced_names(classes: list[str] | None, names: list[str]) -> str | None:
    """Why `classes` mislabels the file's categories (a name of the file at another index), or None.

    Class k is the k-th category by id: `classes` given in another order would name every
    prediction and per-class AP after the wrong category, without any error (a trial's did).
    """
    for k, name in enumerate(classes or []):
        if name in names and names.index(name) != k:
            return (f"classes lists {name!r} as class {k}, but in the file it is class {names.index(name)} (the "
                    f"categories in id order are {', '.join(names)}), so every box would be relabelled; list the "
                    "classes in that order, or leave classes out to take the file's names")
    foreign = [name for name in classes or [] if name not in names]
    if foreign and len(foreign) < len(classes or []):  # some of the file's names, and others: a slip, not a renaming
        k = (classes or []).index(foreign[0])
        theirs = f"whose category {k} (by id) is {names[k]!r}" if k < len(names) else f"which has {len(names)} categories"
        return (f"{foreign[0]!r} (class {k}) is not a category of the file, {theirs}, though the other names are "
                f"the file's [{', '.join(names)}]: give the file's names in their id order, rename every class, "
                "or leave classes out")
    return None


def _coco_annotation(annotation: Any, images: dict[Any, ImageBoxes], index: dict[Any, int],
                     params: dict[str, Any], where: str) -> BoxProblem | None:
    ident = annotation.get("id") if isinstance(annotation, dict) else None

    def problem(message: str) -> BoxProblem:
        return BoxProblem(where, 0, f"annotation id {ident}: {message}")

    if not isinstance(annotation, dict):
        return problem("not an object")
    image = images.get(annotation.get("image_id"))
    if image is None:
        return problem(f"image_id {annotation.get('image_id')} is not in images")
    if annotation.get("category_id") not in index:
        return problem(f"category_id {annotation.get('category_id')} is not in categories")
    if annotation.get("iscrowd"):
        image.crowd += 1
        return None
    try:
        x, y, width, height = (float(v) for v in annotation["bbox"])
    except (KeyError, TypeError, ValueError):
        return problem("bbox is not [x, y, width, height] numbers")
    box = (x, y, x + width, y + height)
    found = box_problem(*box, image.size)
    if found:
        return problem(found)
    added = _add(image, box, index[annotation["category_id"]], params, BoxProblem(where, 0, ""))
    return problem(added.message) if added else None


# ------------------------------------------------------------------------------ shared parameters
def detection_params() -> dict[str, dict[str, Any]]:
    """The parameters both detection inputters take beside their sources."""
    from dsl.inputters.common import COMMON_PARAMS, image_shape_param

    common = {name: spec for name, spec in COMMON_PARAMS.items() if name != "skip_corrupt"}
    return {
        "num_classes": {
            "description": "Object classes (no background class); labels are 0 .. num_classes-1.",
            "type": "integer",
            "minimum": 1,
        },
        "classes": {
            "description": ("Names of the classes, class 0 first: labels may be written as these names, and predict "
                            "and the per-class AP use them; null = numbered (COCO: the categories' names)."),
            "type": ["array", "null"],
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "default": None,
        },
        "max_boxes": {
            "description": ("Boxes per image a batch holds: each image's boxes are padded to it, with their count "
                            "beside them; an image with more is an error naming it."),
            "type": "integer",
            "minimum": 1,
            "default": 100,
        },
        "image_shape": image_shape_param([64, 64, 3]),
        **common,
    }


def class_names_of(params: dict[str, Any]) -> list[str] | None:
    """`classes`, checked against `num_classes` (the same rule `dslrun validate` applies)."""
    from dsl.language.errors import DslError

    names = params.get("classes")
    if names is not None and len(names) != params["num_classes"]:
        raise DslError(f"inputter.classes: {len(names)} names for num_classes {params['num_classes']}; "
                       "give one name per class")
    return list(names) if names is not None else None


# ------------------------------------------------------------------------------ sources
def listed_images(params: dict[str, Any], mode: str, layout: str) -> Iterator[ImageBoxes | BoxProblem | str]:
    """Every image of `mode`'s files (`layout` 'csv' or 'coco'), every bad row or annotation, and
    a string for a problem of the setting itself (a missing file: reported at inputter.<mode>)."""
    from dsl.inputters.common import as_list, existing_dir, existing_file
    from dsl.language.errors import DslError

    key = f"inputter.{mode}"
    for value in as_list(params.get(mode)):
        try:
            path = existing_file(value, key)
            if layout == "csv":
                yield from _nonempty(csv_images(path, params), value, key)
            else:
                folder = existing_dir(params["image_dir"], "inputter.image_dir") if params.get("image_dir") else path.parent
                yield from _nonempty(coco_images(path, folder, params), value, key)
        except DslError as exc:
            yield str(exc).replace("dslrun data synthetic --out", "dslrun data synthetic-detection --out")
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            yield f"{key}: cannot read {value}: {exc}"


def _nonempty(items: Iterator[ImageBoxes | BoxProblem | str], value: str, key: str) -> Iterator[ImageBoxes | BoxProblem | str]:
    """The items, then a problem when the file lists no image, or when every box it holds ends within
    the first pixel: fractions of the image written where pixels belong (trial A16 trained on such
    boxes to mAP 0 with exit 0, warned only that no anchor fitted)."""
    images, boxes, within_a_pixel = 0, 0, True
    for item in items:
        if isinstance(item, ImageBoxes):
            images += 1
            width, height = item.size
            for _, _, y_max, x_max in item.boxes:
                boxes += 1
                within_a_pixel = within_a_pixel and x_max * width <= 1.0 + 1e-6 and y_max * height <= 1.0 + 1e-6
        yield item
    if not images:
        yield f"{key}: {value} lists no images; expected rows `{','.join(BOX_COLUMNS)}` or COCO images"
    elif boxes and within_a_pixel:
        yield (f"{key}: every box of {value} ends within the image's first pixel (no coordinate above 1): boxes are "
               "written in pixels, not as fractions of the image; multiply x by the image's width and y by its height")


def read_sources(params: dict[str, Any], layout: str) -> dict[str, list[ImageBoxes]]:
    """The images of every declared mode; the first problem found is raised as a located DslError."""
    from dsl.inputters.common import MODES
    from dsl.language.errors import DslError

    class_names_of(params)
    listings: dict[str, list[ImageBoxes]] = {}
    for mode in MODES:
        if params.get(mode) is None:
            continue
        listings[mode] = []
        for item in listed_images(params, mode, layout):
            if not isinstance(item, ImageBoxes):
                raise DslError(str(item))
            listings[mode].append(item)
    return listings


def coco_class_names(params: dict[str, Any]) -> list[str] | None:
    """The category names of the first declared COCO file, in the order of their ids (None when unnamed)."""
    from dsl.inputters.common import MODES, as_list

    for mode in MODES:
        for value in as_list(params.get(mode)):
            path = Path(value).expanduser()
            try:
                stat = path.stat()
            except OSError:
                return None
            return _category_names(str(path), stat.st_mtime_ns, stat.st_size)
    return None


@functools.lru_cache(maxsize=8)
def _category_names(path: str, mtime_ns: int, size: int) -> list[str] | None:
    """A file's category names, read once per version of it (validate asks for each metric it checks)."""
    try:
        categories = json.loads(Path(path).read_text(encoding="utf-8"))["categories"]
        return [str(c.get("name", c["id"])) for c in sorted(categories, key=lambda c: c["id"])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two [x_min, y_min, x_max, y_max] boxes (any unit); 0 for empty ones."""
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0

