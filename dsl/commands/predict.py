"""`dslrun predict FILE IMAGE...`: classes and probabilities for image files, as JSON lines."""

from __future__ import annotations

import json
import sys

import click

from dsl.commands._common import CHECKPOINT_HELP, echo_err, load_or_exit, set_option, user_errors


@click.command("predict")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("images", metavar="IMAGE...", nargs=-1, required=True)
@set_option
@click.option("--checkpoint", metavar="PATH", help=CHECKPOINT_HELP)
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the N most probable classes.")
@user_errors
def command(path: str, images: tuple[str, ...], overrides: tuple[str, ...], checkpoint: str | None, top: int | None) -> None:
    """Predict the class of each IMAGE with FILE's trained model.

    Every IMAGE is checked before the model is loaded: a missing or broken file is one line,
    `dslrun: error: cannot read image PATH: REASON`, and exit status 1.
    """
    pipeline = load_or_exit(path, overrides)
    _check_images(images)
    from dsl.engine.launch import restored_runner  # dsl.engine quiets TensorFlow's C++ start-up lines
    from dsl.engine.steps import make_predict_call
    from dsl.errors import DslError
    from dsl.inputters._pipeline import clean_error

    runner = restored_runner(pipeline, checkpoint)
    import tensorflow as tf  # only after dsl.engine, or TensorFlow prints its oneDNN / CPU-feature lines

    predict = make_predict_call(runner.model, runner.modeler, runner.augmenter.eval)
    for image in images:
        try:
            pixels = runner.inputter.decode_file(image)
        except (tf.errors.OpError, OSError) as exc:
            raise DslError(f"cannot read image {image}: {clean_error(getattr(exc, 'message', str(exc)))}") from None
        result = predict(tf.expand_dims(pixels, 0))
        probabilities = [round(float(p), 6) for p in result["probabilities"][0].numpy()]
        record = {"image": image, "class": int(result["classes"][0]), "probabilities": probabilities}
        if top:
            ranked = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])[:top]
            record["top"] = [{"class": i, "probability": probabilities[i]} for i in ranked]
        click.echo(json.dumps(record))


def _check_images(images: tuple[str, ...]) -> None:
    """Exit with one line per IMAGE that is missing or clearly not an image (the checks skip_corrupt makes)."""
    from dsl.inputters._files import header_problem

    problems = [(image, header_problem(image)) for image in images]
    bad = [(image, problem) for image, problem in problems if problem]
    for image, problem in bad:
        echo_err(f"dslrun: error: cannot read image {image}: {problem}")
    if bad:
        sys.exit(1)
