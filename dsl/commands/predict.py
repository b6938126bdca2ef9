"""`dslrun predict FILE [INPUT...] [--text TEXT...]`: the trained model's predictions, as JSON lines.

What an INPUT is belongs to the pipeline's inputter (an image file; for a text pipeline a
file of one text per line), and what each record holds to its modeler (class and
probabilities; a mask PNG written under --out for segmentation).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from dsl.commands._common import CHECKPOINT_HELP, checkpoint_option, echo_err, pipeline_or_exit, set_option, user_errors
from dsl.commands._predict_options import PredictCommand, for_modeler
from dsl.language.resolved import Pipeline


@click.command("predict", cls=PredictCommand)
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("inputs", metavar="INPUT...", nargs=-1)
@click.option("--text", "texts", metavar="TEXT", multiple=True,
              help="A text to classify (text pipelines; repeat for several).")
@set_option
@click.option("--checkpoint", metavar="PATH", help=CHECKPOINT_HELP)
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Directory for the files a prediction writes (masks, overlays); default: the run directory's predictions/.")
@user_errors
def command(path: str, inputs: tuple[str, ...], texts: tuple[str, ...], overrides: tuple[str, ...],
            checkpoint: str | None, out: str | None, **modeler_options: Any) -> None:
    """Predict each INPUT (an image file, or a folder of them; a text file of one input per line) with FILE's trained model.

    Every INPUT is checked before any prediction: each missing or broken file is one line,
    `dslrun: error: cannot read image PATH: REASON`, and exit status 1.
    """
    from dsl.language.errors import DslError

    if not inputs and not texts:
        raise DslError("name at least one INPUT file (or --text TEXT for a text pipeline)")
    pipeline = pipeline_or_exit(path, overrides)
    checkpoint = checkpoint_option(checkpoint)
    options = for_modeler(pipeline.modeler.type, modeler_options, click.get_current_context())
    inputs = _check_inputs(inputs, pipeline)
    from dsl.commands._training import restored_runner  # dsl.engine quiets TensorFlow's C++ start-up lines

    runner = restored_runner(pipeline, checkpoint)
    import tensorflow as tf  # only after dsl.engine, or TensorFlow prints its oneDNN / CPU-feature lines

    from dsl.engine.data_feed import eval_preprocess
    from dsl.engine.steps import make_predict_call

    try:
        examples = runner.inputter.predict_inputs(list(inputs), list(texts))
    except DslError as exc:
        for line in str(exc).splitlines():
            echo_err(f"dslrun: error: {line}")
        sys.exit(1)
    configure = getattr(runner.modeler, "configure_predictions", None)  # options that change how the model predicts
    if configure is not None:
        configure(runner.model, options)
    predict = make_predict_call(runner.model, runner.modeler, eval_preprocess(runner.augmenter))
    options = {**options, "out": out or str(runner.model_dir / "predictions")}
    for source, features in examples:
        result = predict(tf.nest.map_structure(lambda tensor: tf.expand_dims(tensor, 0), features))
        numbers = {name: value.numpy() for name, value in result.items()}
        click.echo(json.dumps(runner.modeler.record(source, numbers, _numpy(features), options)))


def _check_inputs(inputs: tuple[str, ...], pipeline: Pipeline) -> tuple[str, ...]:
    """The INPUTs, a folder given to an image pipeline standing for its image files (trial B11
    expected `predict pipeline.yaml val/five/` to work). Exit with one line per INPUT that is
    missing or clearly unreadable, before TensorFlow starts: an image inputter's files must look
    like images, a text inputter's be UTF-8 text."""
    from dsl.language.registry import lookup

    component = lookup("inputter", pipeline.inputter.type)
    features = component.batch[0] if component.batch else "image"
    if features == "image":
        inputs = tuple(path for item in inputs for path in _images_in(item))
    problems = [(item, _problem(item, features)) for item in inputs]
    bad = [(item, problem) for item, problem in problems if problem]
    for item, problem in bad:
        echo_err(f"dslrun: error: cannot read {'image' if features == 'image' else 'file'} {item}: {problem}")
    if bad:
        sys.exit(1)
    return inputs


def _images_in(item: str) -> list[str]:
    """`item`, or the image files of the folder `item` (not its subfolders), sorted by name."""
    from pathlib import Path

    from dsl.inputters.files import IMAGE_EXTENSIONS
    from dsl.language.errors import DslError

    folder = Path(item)
    if not folder.is_dir():
        return [item]
    images = sorted(str(path) for path in folder.iterdir() if path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS)
    if not images:
        raise DslError(f"{item} is a folder with no image file in it ({', '.join(IMAGE_EXTENSIONS)}; subfolders are not "
                       "read); name image files, or a folder that holds them")
    return images


def _problem(path: str, features: str) -> str | None:
    from dsl.inputters import header_problem

    if features == "image":
        return header_problem(path)
    try:
        with open(path, encoding="utf-8") as handle:
            handle.read()
    except OSError as exc:
        return exc.strerror or str(exc)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    return None


def _numpy(features: object) -> object:
    import tensorflow as tf

    return tf.nest.map_structure(lambda tensor: tensor.numpy(), features)
