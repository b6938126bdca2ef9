"""`dslrun predict FILE IMAGE...`: classes and probabilities for image files, as JSON lines."""

from __future__ import annotations

import json

import click

from dsl.commands._common import load_or_exit, set_option, user_errors


@click.command("predict")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("images", metavar="IMAGE...", nargs=-1, required=True)
@set_option
@click.option("--checkpoint", metavar="PATH", help="Checkpoint prefix or directory (default: the run directory's latest).")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the N most probable classes.")
@user_errors
def command(path: str, images: tuple[str, ...], overrides: tuple[str, ...], checkpoint: str | None, top: int | None) -> None:
    """Predict the class of each IMAGE with FILE's trained model."""
    spec = load_or_exit(path, overrides)
    import tensorflow as tf

    from dsl.engine.launch import restored_runner
    from dsl.engine.steps import make_predict_call
    from dsl.errors import DslError

    runner = restored_runner(spec, checkpoint)
    predict = make_predict_call(runner.model, runner.modeler, runner.augmenter.eval)
    for image in images:
        try:
            pixels = runner.inputter.decode_file(image)
        except (tf.errors.OpError, OSError) as exc:
            raise DslError(f"cannot read image {image}: {getattr(exc, 'message', exc)}") from None
        result = predict(tf.expand_dims(pixels, 0))
        probabilities = [round(float(p), 6) for p in result["probabilities"][0].numpy()]
        record = {"image": image, "class": int(result["classes"][0]), "probabilities": probabilities}
        if top:
            ranked = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])[:top]
            record["top"] = [{"class": i, "probability": probabilities[i]} for i in ranked]
        click.echo(json.dumps(record))
