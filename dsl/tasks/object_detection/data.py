"""`dslrun data synthetic-detection`: shapes with boxes, as a box CSV and as COCO JSON.

    dslrun data synthetic-detection --out data/boxes
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import generated_set, require_image_libraries, say_written


@generated_set("synthetic-detection", items="images", num_train=400, num_val=100, num_classes=(3, 1, 100))
@click.option("--image-size", type=click.IntRange(min=16, max=1024), default=64, show_default=True, help="Height and width in pixels.")
@click.option("--max-objects", type=click.IntRange(min=1, max=20), default=3, show_default=True, help="Shapes per image, at most.")
def synthetic_detection(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, max_objects: int,
                        seed: int, force: bool) -> None:
    """A small learnable detection set: shapes on noise, boxes as a CSV (one row per box) and as COCO JSON."""
    require_image_libraries()
    from dsl.tasks.object_detection._synthetic_data import DetectionSpec, class_names, write

    spec = DetectionSpec(num_train=num_train, num_val=num_val, num_classes=num_classes, seed=seed,
                         image_size=image_size, max_objects=max_objects)
    written, counts = write(out, spec, force)
    say_written(out, written, counts, "images with boxes", f"{num_classes} classes, {image_size}x{image_size} RGB")
    click.echo(f"  {out / 'train.json'}\n  {out / 'eval.json'}")
    click.echo(f"use it with: inputter: {{type: object_detection_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}, classes: [{', '.join(class_names(num_classes))}]}}"
               f" or {{type: coco_json, train: {out / 'train.json'}, val: {out / 'eval.json'}, num_classes: {num_classes}}}")
