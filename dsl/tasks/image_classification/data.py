"""`dslrun data synthetic` and `dslrun data cifar10`: image classification's data sets on disk.

    dslrun data synthetic --out data/synthetic      # small learnable set, a few seconds
    dslrun data cifar10 --out data/cifar10          # download, check MD5, convert
"""

from __future__ import annotations

from pathlib import Path

import click

from dsl.datasets import generated_set, register, require_image_libraries


@generated_set("synthetic", items="images", num_train=2000, num_val=500, num_classes=(10, 2, 1000))
@click.option("--image-size", type=click.IntRange(min=4, max=1024), default=32, show_default=True, help="Height and width in pixels.")
def synthetic(out: Path, num_train: int, num_val: int, num_classes: int, image_size: int, seed: int, force: bool) -> None:
    """A small learnable image set: per-class colour and stripe orientation, plus noise."""
    require_image_libraries()
    from dsl.tasks.image_classification._synthetic_data import SyntheticSpec, write

    spec = SyntheticSpec(num_train=num_train, num_val=num_val, num_classes=num_classes, seed=seed, image_size=image_size)
    written, counts = write(out, spec, force)
    _report(out, written, counts, f"{num_classes} classes, {image_size}x{image_size} RGB", num_classes)


@register
@click.command("cifar10")
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
def cifar10(out: Path, archive: Path | None, keep_binary: bool, no_verify: bool, url: str, timeout: float, force: bool) -> None:
    """CIFAR-10 from its official binary tarball (MD5 checked): 50000 train and 10000 eval PNGs."""
    from dsl.language.errors import DslError

    require_image_libraries()
    from dsl.tasks.image_classification._cifar10_download import Cifar10Request, prepare

    if no_verify and archive is None:
        raise DslError("--no-verify applies only to --from-archive FILE; a download is always checked")
    request = Cifar10Request(out, archive, not no_verify, keep_binary, force, url, timeout)
    written, counts = prepare(request, log=lambda line: click.echo(line, err=True))
    _report(out, written, counts, "10 classes, 32x32 RGB", 10)
    if keep_binary:
        click.echo(f"binary batches (for inputter type cifar10_binary, data_dir: {out}): {out / 'cifar-10-batches-bin'}")


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
