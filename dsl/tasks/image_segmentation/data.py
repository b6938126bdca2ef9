"""`dslrun data synthetic-segmentation`: images and class-index PNG masks on disk.

    dslrun data synthetic-segmentation --out data/shapes
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import generated_set, require_image_libraries, say_written


@generated_set("synthetic-segmentation", items="images", num_train=400, num_val=100, num_classes=(4, 2, 255),
               classes_help="Classes, background (0) included.")
@click.option("--image-size", type=click.IntRange(min=8, max=1024), default=64, show_default=True, help="Height and width in pixels.")
def synthetic_segmentation(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, seed: int,
                           force: bool) -> None:
    """A small learnable segmentation set: shapes on noise, a class-index PNG mask per image."""
    require_image_libraries()
    from dsl.tasks.image_segmentation._synthetic_data import SegmentationSpec, write

    spec = SegmentationSpec(num_train=num_train, num_val=num_val, num_classes=num_classes, seed=seed,
                            image_size=image_size)
    written, counts = write(out, spec, force)
    say_written(out, written, counts, "images and masks", f"{num_classes} classes, {image_size}x{image_size} RGB")
    click.echo(f"use it with: inputter: {{type: image_segmentation_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}")
