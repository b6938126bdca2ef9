"""`dslrun data synthetic-text`: a CSV of short labelled texts.

    dslrun data synthetic-text --out data/reviews
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import register, say_written


@register
@click.command("synthetic-text")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=2000, show_default=True, help="Train texts.")
@click.option("--num-val", type=click.IntRange(min=1), default=500, show_default=True, help="Eval texts.")
@click.option("--num-classes", type=click.IntRange(min=2, max=100), default=3, show_default=True, help="Classes.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated texts.")
@click.option("--force", is_flag=True, help="Write the texts again even when the directory is complete.")
def synthetic_text(out: Path, num_train: int, num_val: int, num_classes: int, seed: int, force: bool) -> None:
    """A small learnable text set: short texts whose class words and phrases decide the label."""
    from dsl.tasks.text_classification._synthetic_data import TextSpec, write

    spec = TextSpec(num_train, num_val, num_classes, seed)
    written, counts = write(out, spec, force)
    say_written(out, written, counts, "texts", f"{num_classes} classes")
    click.echo(f"use it with: inputter: {{type: text_classification_csv, train: {out / 'train.csv'}, "
               f"val: {out / 'eval.csv'}, num_classes: {num_classes}}}")
