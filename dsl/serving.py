"""The SavedModel `dslrun export` writes: one model behind two serving signatures.

- `serving_default(images)`: float32 pixels [batch, H, W, C] in [0, 1], the shape the
  pipeline trained on — for clients that decode images themselves.
- `serving_bytes(image_bytes)`: the encoded files (PNG, JPEG, GIF, BMP), a string per image,
  as TF Serving clients send them (`{"b64": ...}` in its REST API: the input name ends in
  `_bytes`). Decoding, channel conversion (an RGB file to a 1-channel model and back) and
  resizing happen in the graph, with the same function the inputters and `dslrun predict`
  use, so a file gets the same prediction whichever way it comes in.

Both apply the augmenter's eval preprocessing and return `classes` and `probabilities`.
Imports TensorFlow: import it only where a model is exported.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.engine.steps import make_predict_call
from dsl.inputters._pipeline import decode_image


@dataclass(frozen=True)
class Signature:
    """One serving signature, as a client sees it."""

    name: str
    inputs: str  # e.g. "images: float32 [batch, 32, 32, 3], values in [0, 1]"
    outputs: str  # e.g. "classes: int32 [batch], probabilities: float32 [batch, 10]"

    def __str__(self) -> str:
        return f"{self.name}({self.inputs}) -> {self.outputs}"


class _Serving(tf.Module):
    """Holds the model so its variables are saved, and the two signatures that use them."""

    def __init__(self, model: tf.keras.Model, modeler: Any, preprocess: Any, image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.model = model
        predict = make_predict_call(model, modeler, preprocess)
        pixels = tf.TensorSpec([*image_shape], tf.float32)

        def from_bytes(image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
            decoded = tf.map_fn(lambda data: decode_image(data, image_shape), image_bytes, fn_output_signature=pixels)
            return predict(decoded)

        self.serve = tf.function(
            lambda images: predict(images), input_signature=[tf.TensorSpec([None, *image_shape], tf.float32, name="images")]
        )
        self.serve_bytes = tf.function(from_bytes, input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])


def export_saved_model(runner: Any, out: str | Path) -> list[Signature]:
    """Write runner's model as a SavedModel in `out`, replacing an earlier export there at once.

    The model is saved next to `out` first and moved into place, so a failed export leaves
    the earlier one whole. Returns the signatures, for the user to read.
    """
    height, width, channels = runner.context.image_shape
    module = _Serving(runner.model, runner.modeler, runner.augmenter.eval, (height, width, channels))
    signatures = {"serving_default": module.serve, "serving_bytes": module.serve_bytes}
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tf.saved_model.save(module, str(staging), signatures=signatures)
        _replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    described = {name: _outputs(function) for name, function in signatures.items()}
    return [
        Signature("serving_default", f"images: float32 [batch, {height}, {width}, {channels}], values in [0, 1]",
                  described["serving_default"]),
        Signature("serving_bytes", f"image_bytes: string [batch], encoded PNG/JPEG files of any size and channels, "
                  f"decoded to {height}x{width}x{channels} in the graph", described["serving_bytes"]),
    ]


def _replace(staging: Path, target: Path) -> None:
    """Move the new export into place; an earlier one goes only once the new one is there."""
    if not target.exists():
        staging.rename(target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    target.rename(retired / target.name)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def _outputs(function: Any) -> str:
    structured = function.get_concrete_function().structured_outputs
    return ", ".join(f"{name}: {tensor.dtype.name} {_shape(tensor.shape)}" for name, tensor in sorted(structured.items()))


def _shape(shape: tf.TensorShape) -> str:
    return "[" + ", ".join("batch" if dim is None else str(dim) for dim in shape.as_list()) + "]"
