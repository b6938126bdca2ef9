"""SavedModel export: the model plus its eval preprocessing behind one serving signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.engine.steps import make_predict_call


class _Serving(tf.Module):
    """Holds the model so its variables are saved, and the signature that uses them."""

    def __init__(self, model: tf.keras.Model, modeler: Any, preprocess: Any, image_shape: tuple) -> None:
        super().__init__()
        self.model = model
        predict = make_predict_call(model, modeler, preprocess)
        spec = tf.TensorSpec([None, *image_shape], tf.float32, name="images")
        self.serve = tf.function(lambda images: predict(images), input_signature=[spec])


def export_saved_model(runner: Any, out: str | Path) -> None:
    """Write runner's model as a SavedModel in `out` (overwriting an older export there)."""
    module = _Serving(runner.model, runner.modeler, runner.augmenter.eval, runner.context.image_shape)
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
