"""`init_checkpoint`: start training from pretrained weights (fine-tuning, transfer learning).

It acts only on a fresh run: when the run resumed from its own checkpoint, the weights are
already the trained ones and loading the pretrained ones would undo that. Freezing by
`trainable` applies on resumed runs too, so a resumed fine-tuning trains the same layers.
"""

from __future__ import annotations

import re
from typing import Any

from dsl.callbacks.base import Callback
from dsl.errors import DslError
from dsl.registry import register


def _compile(patterns: list[str], key: str) -> list[re.Pattern[str]]:
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise DslError(f"{key}[{index}] {pattern!r} is not a valid regular expression: {exc}") from None
    return compiled


_PATTERNS = {"type": "array", "items": {"type": "string", "minLength": 1}}


@register(
    "callback",
    "init_checkpoint",
    params={
        "path": {
            "description": (
                "Pretrained weights: a dslrun run directory (or its checkpoints/ or best/), a checkpoint "
                "prefix such as runs/x/checkpoints/ckpt-100, or a Keras .h5 / .weights.h5 weights file."
            ),
            "type": "string",
            "minLength": 1,
        },
        "skip": {
            **_PATTERNS,
            "description": (
                "Regular expressions of variable names not to load (searched in names like logits/kernel), "
                "e.g. ['^logits/'] to keep a fresh classifier for a new number of classes."
            ),
            "default": [],
        },
        "trainable": {
            "description": (
                "Regular expressions of variable names to train; layers with no matching variable are "
                "frozen (null: train everything)."
            ),
            "anyOf": [{**_PATTERNS, "minItems": 1}, {"type": "null"}],
            "default": None,
        },
    },
    required=("path",),
    description=(
        "Load pretrained weights before training starts (not when resuming), optionally skipping or freezing layers."
    ),
    unique=True,
)
class InitCheckpoint(Callback):
    """Lambda's pretrained model, with name patterns for what to load and what to train.

    Example:
        callbacks:
          - {type: init_checkpoint, path: runs/cifar10/best, skip: ['^logits/'], trainable: ['^logits/']}
    """

    priority = "VERY_HIGH"

    def __init__(self, params: dict[str, Any] | None = None, context: Any = None) -> None:
        super().__init__(params, context)
        self.skip = _compile(self.params.get("skip") or [], "init_checkpoint.skip")
        trainable = self.params.get("trainable")
        self.trainable = None if trainable is None else _compile(trainable, "init_checkpoint.trainable")

    def before_run(self, runner: Any) -> None:
        if runner.resumed:
            runner.print("init_checkpoint: resumed from the run directory, pretrained weights not loaded")
        else:
            self._load(runner)
        if self.trainable is not None:
            self._freeze(runner)

    def _load(self, runner: Any) -> None:
        from dsl.callbacks._pretrained import read_pairs, resolve, variable_name

        path = resolve(self.params["path"])
        pairs = read_pairs(runner.model, path)
        if not pairs:
            raise DslError(f"init_checkpoint.path: {path!r} holds no variable of this model")
        named = [(variable_name(variable), variable, value) for variable, value in pairs]
        skipped = [name for name, _, _ in named if any(p.search(name) for p in self.skip)]
        load = [(name, variable, value) for name, variable, value in named if name not in skipped]
        wrong = [(name, variable, value) for name, variable, value in load if value.shape != tuple(variable.shape)]
        if wrong:
            details = "; ".join(
                f"{name} is {tuple(variable.shape)} in the model but {value.shape} in the file"
                for name, variable, value in wrong
            )
            example = wrong[0][0].split("/")[0]
            raise DslError(
                f"init_checkpoint: shapes differ from {path!r}: {details}; add a pattern matching these "
                f"variables to init_checkpoint.skip to keep their fresh values, e.g. skip: ['^{example}/']"
            )
        for _, variable, value in load:
            variable.assign(value.astype(variable.dtype.as_numpy_dtype))
        self._report(runner, path, len(load), skipped, len(runner.model.weights) - len(pairs))

    def _report(self, runner: Any, path: str, loaded: int, skipped: list[str], absent: int) -> None:
        unused = [p.pattern for p in self.skip if not any(p.search(name) for name in skipped)]
        message = f"init_checkpoint: loaded {loaded} variables from {path}"
        if skipped:
            message += f"; skipped {len(skipped)} by pattern ({', '.join(skipped)})"
        if absent:
            message += f"; {absent} not in the file kept their initial values"
        if unused:
            message += f"; skip patterns matching nothing: {unused}"
        runner.print(message)

    def _freeze(self, runner: Any) -> None:
        from dsl.callbacks._freeze import freeze_unmatched

        frozen = freeze_unmatched(runner.model, self.trainable)
        trainable = len(runner.model.trainable_weights)
        runner.print(f"init_checkpoint: froze {len(frozen)} layers; {trainable} variables stay trainable")
