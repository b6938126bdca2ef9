"""`dslrun data`: make data sets on disk in the CSV + PNG layout the inputters read.

    dslrun data synthetic --out data/synthetic      # small learnable set, a few seconds
    dslrun data cifar10 --out data/cifar10          # download, check MD5, convert
    dslrun data synthetic-segmentation --out data/shapes   # images + class-index PNG masks
    dslrun data synthetic-text --out data/reviews    # a CSV of short labelled texts
    dslrun data synthetic-detection --out data/boxes  # shapes with boxes: a box CSV and COCO JSON

Re-running over a complete directory with the same settings does nothing (pass --force
to write it again); an interrupted run leaves the directory marked incomplete, and the
next run writes it again.
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.commands._common import user_errors


@click.group("data")
def command() -> None:
    """Make data sets on disk in the layouts the inputters read (CSV + PNG, CSV of texts)."""


@command.command("synthetic")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=2000, show_default=True, help="Train images.")
@click.option("--num-val", type=click.IntRange(min=1), default=500, show_default=True, help="Eval images.")
@click.option("--num-classes", type=click.IntRange(min=2, max=1000), default=10, show_default=True, help="Classes.")
@click.option("--image-size", type=click.IntRange(min=4, max=1024), default=32, show_default=True, help="Height and width in pixels.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated images.")
@click.option("--force", is_flag=True, help="Write the images again even when the directory is complete.")
@user_errors
def synthetic(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, seed: int, force: bool) -> None:
    """A small learnable image set: per-class colour and stripe orientation, plus noise."""
    _require_image_libraries()
    from dsl.datasets.synthetic import SyntheticSpec, write

    spec = SyntheticSpec(num_train, num_val, num_classes, image_size, seed)
    written, counts = write(out, spec, force)
    _report(out, written, counts, f"{num_classes} classes, {image_size}x{image_size} RGB", num_classes)


@command.command("cifar10")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option(
    "--from-archive",
    "archive",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Use this copy of cifar-10-binary.tar.gz instead of downloading it.",
)
@click.option("--keep-binary", is_flag=True, help="Also keep the .bin files in OUT/cifar-10-batches-bin (for cifar10_binary).")
@click.option("--no-verify", is_flag=True, help="Skip the MD5 check of --from-archive (e.g. a re-packed copy).")
@click.option("--url", default="", help="Download from this mirror instead (the MD5 is still checked).")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True, help="Network timeout in seconds.")
@click.option("--force", is_flag=True, help="Convert again even when the directory is complete.")
@user_errors
def cifar10(out: Path, archive: Path | None, keep_binary: bool, no_verify: bool, url: str, timeout: float, force: bool) -> None:
    """CIFAR-10 from its official binary tarball (MD5 checked): 50000 train and 10000 eval PNGs."""
    from dsl.language.errors import DslError

    _require_image_libraries()
    from dsl.datasets.cifar10 import Cifar10Request, prepare

    if no_verify and archive is None:
        raise DslError("--no-verify applies only to --from-archive FILE; a download is always checked")
    request = Cifar10Request(out, archive, not no_verify, keep_binary, force, url, timeout)
    written, counts = prepare(request, log=lambda line: click.echo(line, err=True))
    _report(out, written, counts, "10 classes, 32x32 RGB", 10)
    if keep_binary:
        click.echo(f"binary batches (for inputter type cifar10_binary, data_dir: {out}): {out / 'cifar-10-batches-bin'}")


@command.command("synthetic-segmentation")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=400, show_default=True, help="Train images.")
@click.option("--num-val", type=click.IntRange(min=1), default=100, show_default=True, help="Eval images.")
@click.option("--num-classes", type=click.IntRange(min=2, max=255), default=4, show_default=True,
              help="Classes, background (0) included.")
@click.option("--image-size", type=click.IntRange(min=8, max=1024), default=64, show_default=True, help="Height and width in pixels.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated images.")
@click.option("--force", is_flag=True, help="Write the images again even when the directory is complete.")
@user_errors
def synthetic_segmentation(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, seed: int,
                           force: bool) -> None:
    """A small learnable segmentation set: shapes on noise, a class-index PNG mask per image."""
    _require_image_libraries()
    from dsl.datasets.synthetic_segmentation import SegmentationSpec, write

    spec = SegmentationSpec(num_train, num_val, num_classes, image_size, seed)
    written, counts = write(out, spec, force)
    _say_written(out, written, counts, "images and masks", f"{num_classes} classes, {image_size}x{image_size} RGB")
    click.echo(f"use it with: inputter: {{type: image_segmentation_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}")


@command.command("synthetic-detection")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=400, show_default=True, help="Train images.")
@click.option("--num-val", type=click.IntRange(min=1), default=100, show_default=True, help="Eval images.")
@click.option("--num-classes", type=click.IntRange(min=1, max=100), default=3, show_default=True, help="Classes.")
@click.option("--image-size", type=click.IntRange(min=16, max=1024), default=64, show_default=True, help="Height and width in pixels.")
@click.option("--max-objects", type=click.IntRange(min=1, max=20), default=3, show_default=True, help="Shapes per image, at most.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated images.")
@click.option("--force", is_flag=True, help="Write the images again even when the directory is complete.")
@user_errors
def synthetic_detection(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, max_objects: int,
                        seed: int, force: bool) -> None:
    """A small learnable detection set: shapes on noise, boxes as a CSV (one row per box) and as COCO JSON."""
    _require_image_libraries()
    from dsl.datasets.synthetic_detection import DetectionSpec, class_names, write

    spec = DetectionSpec(num_train, num_val, num_classes, image_size, max_objects, seed)
    written, counts = write(out, spec, force)
    _say_written(out, written, counts, "images with boxes", f"{num_classes} classes, {image_size}x{image_size} RGB")
    click.echo(f"  {out / 'train.json'}\n  {out / 'eval.json'}")
    click.echo(f"use it with: inputter: {{type: object_detection_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}, classes: [{', '.join(class_names(num_classes))}]}}"
               f" or {{type: coco_json, train: {out / 'train.json'}, val: {out / 'eval.json'}, num_classes: {num_classes}}}")


@command.command("synthetic-text")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=2000, show_default=True, help="Train texts.")
@click.option("--num-val", type=click.IntRange(min=1), default=500, show_default=True, help="Eval texts.")
@click.option("--num-classes", type=click.IntRange(min=2, max=100), default=3, show_default=True, help="Classes.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated texts.")
@click.option("--force", is_flag=True, help="Write the texts again even when the directory is complete.")
@user_errors
def synthetic_text(out: Path, num_train: int, num_val: int, num_classes: int, seed: int, force: bool) -> None:
    """A small learnable text set: short texts whose class words and phrases decide the label."""
    from dsl.datasets.synthetic_text import TextSpec, write

    spec = TextSpec(num_train, num_val, num_classes, seed)
    written, counts = write(out, spec, force)
    _say_written(out, written, counts, "texts", f"{num_classes} classes")
    click.echo(f"use it with: inputter: {{type: text_classification_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}")


def _say_written(out: Path, written: bool, counts: dict[str, int], items: str, what: str) -> None:
    if written:
        click.echo(f"wrote {counts['train']} train + {counts['eval']} eval {items} ({what}) to {out}")
    else:
        click.echo(f"{out} is already complete ({counts['train']} train + {counts['eval']} eval {items}); "
                   "--force writes it again")
    click.echo(f"  {out / 'train.csv'}\n  {out / 'eval.csv'}")


def _require_image_libraries() -> None:
    """numpy and Pillow come with the `train` extra; say so instead of a traceback."""
    from dsl.language.errors import DslError

    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as exc:
        raise DslError(f"dslrun data needs numpy and Pillow ({exc.name} is missing); pip install 'dslrun[train]'") from None


def _report(out: Path, written: bool, counts: dict[str, int], what: str, num_classes: int) -> None:
    if written:
        click.echo(f"wrote {counts['train']} train + {counts['eval']} eval images ({what}) to {out}")
    else:
        click.echo(f"{out} is already complete ({counts['train']} train + {counts['eval']} eval images); --force writes it again")
    click.echo(f"  {out / 'train.csv'}\n  {out / 'eval.csv'}")
    click.echo(
        f"use it with: inputter: {{type: image_classification_csv, train: {out / 'train.csv'}, "
        f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}"
    )
