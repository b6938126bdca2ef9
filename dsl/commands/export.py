"""`dslrun export FILE --out DIR [--force]`: a SavedModel with a serving signature per input kind (see dsl.commands._serving)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from dsl.commands._common import CHECKPOINT_HELP, checkpoint_option, pipeline_or_exit, set_option, user_errors


@click.command("export")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory of the SavedModel.")
@click.option("--force", is_flag=True, help="Replace an earlier export in --out (other non-empty directories are refused).")
@set_option
@click.option("--checkpoint", metavar="PATH", help=CHECKPOINT_HELP)
@click.option("--average-last", "average", type=click.IntRange(min=1), default=None, metavar="N",
              help="Export the mean of the weights of the run's last N training checkpoints (Vaswani et al.'s "
                   "checkpoint averaging) instead of one checkpoint's.")
@user_errors
def command(path: str, out: str, overrides: tuple[str, ...], checkpoint: str | None, force: bool,
            average: int | None) -> None:
    """Export FILE's trained model as a SavedModel in --out (refused when --out is not empty, unless --force).

    Every signature applies the augmenter's eval preprocessing and returns the modeler's
    predictions (`classes` and `probabilities` for a classifier, `mask` for segmentation).
    An image pipeline's `serving_default` takes `images` (float32, N x H x W x C, values in
    [0, 1]) and `serving_bytes` takes `image_bytes` (string, N: encoded PNG/JPEG files of any
    size and channels, decoded and resized in the graph, as TF Serving clients send them);
    a text pipeline's `serving_default` takes `text` (string, N: raw text, tokenized with the
    run's vocabulary in the graph). The signatures are printed after the export.
    """
    from dsl.language.errors import DslError

    pipeline = pipeline_or_exit(path, overrides)
    checkpoint = checkpoint_option(checkpoint)
    if average and checkpoint:
        raise click.UsageError("--average-last averages the run directory's last checkpoints; drop --checkpoint")
    problem = out_problem(out, force)
    if problem:
        raise DslError(problem)
    from dsl.commands._serving import export_saved_model
    from dsl.commands._training import restored_runner

    runner = restored_runner(pipeline, checkpoint)
    source = str(runner.restored_from)
    if average:
        from dsl.engine.averaging import average_last

        averaged = average_last(runner.model, runner.checkpoints.listed(), average)
        source = f"the mean of {len(averaged)} checkpoints ({', '.join(Path(p).name for p in averaged)})"
    signatures = export_saved_model(runner, out)
    click.echo(f"dslrun: exported {source} to {out}")
    for signature in signatures:
        click.echo(f"  {signature}")


# What a directory holds when it is an earlier export, and so may be replaced with --force.
SAVED_MODEL_ENTRIES = frozenset({"saved_model.pb", "variables", "assets", "fingerprint.pb", "keras_metadata.pb"})


def out_problem(out: str | Path, force: bool) -> str | None:
    """Why the export must not write to `out`, or None; checked before TensorFlow starts.

    `--force` replaces an earlier export only: a directory holding anything else (other
    models, a home directory given by mistake) is never deleted.
    """
    path = Path(out)
    if not path.exists():
        return None
    entries = sorted(os.listdir(path)) if path.is_dir() else []
    if not path.is_dir() or not entries:
        return None if path.is_dir() else f"--out {out} is a file, not a directory"
    if not force:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        return f"--out {out} is not empty ({shown}); choose another directory, or pass --force to replace an earlier export"
    foreign = [entry for entry in entries if entry not in SAVED_MODEL_ENTRIES]
    if foreign or "saved_model.pb" not in entries:
        what = f"holds {', '.join(foreign[:3])}" if foreign else "has no saved_model.pb"
        return f"--out {out} {what}: it is not an earlier export, and --force only replaces one; choose another directory"
    return None
