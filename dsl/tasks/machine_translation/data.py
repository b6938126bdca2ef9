"""`dslrun data synthetic-translation`: a small parallel corpus, as TSV and as two aligned files.

    dslrun data synthetic-translation --out data/translation
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import register


@register
@click.command("synthetic-translation")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to write.")
@click.option("--num-train", type=click.IntRange(min=1), default=2000, show_default=True, help="Train sentence pairs.")
@click.option("--num-val", type=click.IntRange(min=1), default=200, show_default=True, help="Eval sentence pairs.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the generated pairs.")
@click.option("--force", is_flag=True, help="Write the pairs again even when the directory is complete.")
def synthetic_translation(out: Path, num_train: int, num_val: int, seed: int, force: bool) -> None:
    """A small learnable language pair: English-like sentences and a made-up language with
    reordering (the verb last, the adjective after its noun) and agreement."""
    from dsl.tasks.machine_translation._synthetic_data import SOURCE_SUFFIX, TARGET_SUFFIX, TranslationSpec, write

    written, counts = write(out, TranslationSpec(num_train=num_train, num_val=num_val, seed=seed), force)
    if written:
        click.echo(f"wrote {counts['train']} train + {counts['eval']} eval sentence pairs to {out}")
    else:
        click.echo(f"{out} is already complete ({counts['train']} train + {counts['eval']} eval pairs); "
                   "--force writes it again")
    click.echo(f"  {out / 'train.tsv'}  {out / 'eval.tsv'}  (source<TAB>target)\n"
               f"  {out / f'train.{SOURCE_SUFFIX}'} + {out / f'train.{TARGET_SUFFIX}'}  (aligned lines)")
    click.echo(f"use it with: inputter: {{type: parallel_text, train: {out / 'train.tsv'}, val: {out / 'eval.tsv'}}}")
