"""`dslrun data synthetic-text`: a CSV of short labelled texts.

    dslrun data synthetic-text --out data/reviews
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import generated_set, say_written


@generated_set("synthetic-text", items="texts", num_train=2000, num_val=500, num_classes=(3, 2, 100))
def synthetic_text(out: Path, num_train: int, num_val: int, num_classes: int, seed: int, force: bool) -> None:
    """A small learnable text set: short texts whose class words and phrases decide the label."""
    from dsl.tasks.text_classification._synthetic_data import TextSpec, write

    spec = TextSpec(num_train=num_train, num_val=num_val, num_classes=num_classes, seed=seed)
    written, counts = write(out, spec, force)
    say_written(out, written, counts, "texts", f"{num_classes} classes")
    click.echo(f"use it with: inputter: {{type: text_classification_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}")
