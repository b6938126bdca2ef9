"""The SavedModel `dslrun export` writes: one model behind a serving signature per input kind.

The inputter says what a client may send (`Inputter.serving_inputs()`: pixels and encoded
image files for an image inputter, raw strings for a text one) and how it becomes the
features the network was trained on, in the graph; the augmenter's eval preprocessing
follows; the modeler says what comes back (`Modeler.predictions`: classes and
probabilities, a mask...). The first input is `serving_default`, the others are named
`serving_<input>` (`serving_bytes` for `image_bytes`, the TF Serving convention).

Imports TensorFlow: import it only where a model is exported.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.engine.data_feed import eval_preprocess
from dsl.engine.steps import make_predict_call


@dataclass(frozen=True)
class Signature:
    """One serving signature, as a client sees it."""

    name: str
    inputs: str  # e.g. "images: float32 [batch, 32, 32, 3], values in [0, 1]"
    outputs: str  # e.g. "classes: int32 [batch], probabilities: float32 [batch, 10]"

    def __str__(self) -> str:
        return f"{self.name}({self.inputs}) -> {self.outputs}"


def signature_name(index: int, input_name: str) -> str:
    """`serving_default` for the first input; `serving_bytes` for `image_bytes`; else `serving_<name>`."""
    if index == 0:
        return "serving_default"
    return "serving_bytes" if input_name.endswith("_bytes") else f"serving_{input_name}"


class _Serving(tf.Module):
    """Holds the model (and any lookup tables of the inputs) so their state is saved, and the
    signatures that use them."""

    def __init__(self, model: tf.keras.Model, modeler: Any, preprocess: Any, inputs: list[Any]) -> None:
        super().__init__()
        self.model = model
        self.kept = [obj for serving_input in inputs for obj in serving_input.keep]
        predict = make_predict_call(model, modeler, preprocess)
        self.functions = {}
        for index, serving_input in enumerate(inputs):
            self.functions[signature_name(index, serving_input.name)] = tf.function(
                _serve(predict, serving_input.to_features), input_signature=[serving_input.spec]
            )


def _serve(predict: Any, to_features: Any) -> Any:
    def serve(raw: tf.Tensor) -> dict[str, tf.Tensor]:
        return predict(to_features(raw))  # type: ignore[no-any-return]

    return serve


def export_saved_model(runner: Any, out: str | Path) -> list[Signature]:
    """Write runner's model as a SavedModel in `out`, replacing an earlier export there at once.

    The model is saved next to `out` first and moved into place, so a failed export leaves
    the earlier one whole. Returns the signatures, for the user to read.
    """
    inputs = runner.inputter.serving_inputs()
    module = _Serving(runner.model, runner.modeler, eval_preprocess(runner.augmenter), inputs)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tf.saved_model.save(module, str(staging), signatures=module.functions)
        _replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    notes = getattr(runner.modeler, "serving_notes", {})  # what a shape alone does not say (a box's order)
    return [Signature(name, serving_input.description, _outputs(function, notes))
            for (name, function), serving_input in zip(module.functions.items(), inputs)]


def _replace(staging: Path, target: Path) -> None:
    """Move the new export into place; an earlier one goes only once the new one is there."""
    if not target.exists():
        staging.rename(target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    target.rename(retired / target.name)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def _outputs(function: Any, notes: dict[str, str]) -> str:
    structured = function.get_concrete_function().structured_outputs
    return ", ".join(f"{name}: {tensor.dtype.name} {_shape(tensor.shape)}" + (f" ({notes[name]})" if name in notes else "")
                     for name, tensor in sorted(structured.items()))


def _shape(shape: tf.TensorShape) -> str:
    return "[" + ", ".join("batch" if dim is None else str(dim) for dim in shape.as_list()) + "]"
