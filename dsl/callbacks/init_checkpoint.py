"""`init_checkpoint`: start training from pretrained weights (fine-tuning, transfer learning).

Weights are restored by variable name; what is restored, reset, skipped, missing from the
file or unexpected in it is decided before anything is assigned (dsl/callbacks/_restore_plan.py),
so an error leaves the model as it was. It acts only on a fresh run: when the run resumed
from its own checkpoint, the weights are already the trained ones and loading the
pretrained ones would undo that. Freezing by
`trainable` applies on resumed runs too, so a resumed fine-tuning trains the same layers.
"""

from __future__ import annotations

import re
from typing import Any

from dsl.callbacks._init_checkpoint_check import check_init_checkpoint, missing_at_start, restore_diagnostics
from dsl.engine.hooks import Callback
from dsl.language.context import BuildContext
from dsl.language.errors import DslError
from dsl.language.registry import register


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
                "prefix such as runs/x/checkpoints/ckpt-100, or a Keras .h5 / .weights.h5 weights file. "
                "Variables are restored by name (conv_1/kernel), never by position."
            ),
            "type": "string",
            "minLength": 1,
        },
        "skip": {
            **_PATTERNS,
            "description": (
                "Variables not to load: `head` or `backbone` (the network's groups), or regular expressions "
                "searched in names like logits/kernel. Each entry must match a variable of the model or of "
                "the file."
            ),
            "default": [],
        },
        "trainable": {
            "description": (
                "Variables to train: `head`, `backbone` or regular expressions of variable names; layers with "
                "no matching variable are frozen, and a frozen batch normalisation layer keeps its moving "
                "statistics (null: train everything)."
            ),
            "anyOf": [{**_PATTERNS, "minItems": 1}, {"type": "null"}],
            "default": None,
        },
        "reset_head": {
            "description": (
                "Whether the network's head (its classifier, see `dslrun show --variables`) keeps its fresh "
                "initial values: null = when the file's head has another shape (another number of classes) "
                "or is absent; true = always; false = restore it (an error when the shapes differ)."
            ),
            "type": ["boolean", "null"],
            "default": None,
        },
        "allow_missing": {
            "description": (
                "Accept a file that lacks some of the model's variables (besides the head): they keep their "
                "initial values and are listed as a warning. false: an error, the sign of another network."
            ),
            "type": "boolean",
            "default": False,
        },
        "allow_unexpected": {
            "description": (
                "Accept a file holding variables the model has not (a larger network): they are listed as a "
                "warning and ignored. false: an error."
            ),
            "type": "boolean",
            "default": False,
        },
        "unfreeze_after_epochs": {
            "description": (
                "Two-phase fine-tuning: train what `trainable` selects for this many data epochs, then every "
                "layer (batch normalisation as freeze_batch_norm says). null: `trainable` holds for the whole run."
            ),
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
        },
        "backbone_lr_multiplier": {
            "description": (
                "The backbone's learning rate as a fraction of the optimizer's whenever it trains (after "
                "unfreeze_after_epochs, or the whole run without `trainable`), e.g. 0.1; the head keeps the "
                "optimizer's. Applied to the gradients: sgd, momentum and nesterov only."
            ),
            "type": "number",
            "exclusiveMinimum": 0.0,
            "default": 1.0,
        },
        "freeze_batch_norm": {
            "description": (
                "Keep every batch normalisation layer frozen for the whole run: inference mode (the base data's "
                "moving mean and variance), gamma and beta not trained. false: a batch normalisation layer "
                "trains, and updates its statistics, when its layer is trainable."
            ),
            "type": "boolean",
            "default": False,
        },
    },
    required=("path",),
    unique=True,
    checks=[check_init_checkpoint],
    build_checks=[restore_diagnostics],
    start_checks=[missing_at_start],
)
class InitCheckpoint(Callback):
    """Load pretrained weights by variable name before training starts (not when resuming): the head reset when the classes
    change, layers skipped or frozen by group (head, backbone) or pattern.

    Lambda's pretrained model restored by name, with Model Garden's head / backbone groups.

    Example:
        callbacks:
          - {type: init_checkpoint, path: runs/cifar10/best, trainable: [head]}
    """

    priority = "VERY_HIGH"

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        super().__init__(params, context)
        self._unfreeze_at: int | None = None
        self._frozen: list[str] = []  # the layers `trainable` froze
        self._head_reset: list[str] = []  # the head's variables left at their fresh values
        self.skip_entries: list[str] = list(self.params.get("skip") or [])
        trainable = self.params.get("trainable")
        self.trainable_entries: list[str] | None = None if trainable is None else list(trainable)
        _compile(self.skip_entries, "init_checkpoint.skip")
        if self.trainable_entries is not None:
            _compile(self.trainable_entries, "init_checkpoint.trainable")

    def before_run(self, runner: Any) -> None:
        self._origin: tuple[str, Any] | None = None
        if runner.resumed:
            runner.print("init_checkpoint: resumed from the run directory, pretrained weights not loaded")
        else:
            self._load(runner)
        self._unfreeze_at = self.params.get("unfreeze_after_epochs")
        if self._unfreeze_at is not None and runner.epoch >= self._unfreeze_at:
            self._unfreeze_at = None  # resumed in the second phase: nothing is frozen
        elif self.trainable_entries is not None:
            self._freeze(runner)
        if self.params.get("freeze_batch_norm"):
            self._freeze_batch_norm(runner)
        scaled = self._scale_backbone(runner)
        if scaled and self.trainable_entries is None:  # with trainable, the unfreezing line says it
            runner.print(f"init_checkpoint: {scaled} backbone variables train at "
                         f"{self.params['backbone_lr_multiplier']:g} x the learning rate (backbone_lr_multiplier), "
                         "the head at 1 x")
        if self._origin is not None and runner.placement.is_chief:  # the start is accepted: record it
            _record_origin(runner.model_dir, self.params["path"], *self._origin)

    def before_train_iter(self, runner: Any) -> None:
        """The second phase of a two-phase fine-tuning starts at its data epoch."""
        if self._unfreeze_at is not None and runner.epoch >= self._unfreeze_at:
            from dsl.callbacks._freeze import unfreeze

            thawed = unfreeze(runner.model, self._frozen, keep_batch_norm_frozen=bool(self.params.get("freeze_batch_norm")))
            self._unfreeze_at = None
            self._scale_backbone(runner)
            runner.compile_calls()  # the train step differentiates the variables trainable when traced
            runner.print(f"init_checkpoint: epoch {runner.epoch}: unfroze {len(thawed)} layers; "
                         f"{len(runner.model.trainable_weights)} variables train{self._rate_note(runner)}")

    def _rate_note(self, runner: Any) -> str:
        """The rate the backbone starts at, in numbers: trial B15's inherited schedule had already
        lowered it a hundredfold, and "0.1 x the learning rate" did not show it."""
        from dsl.callbacks.lr_logger import current_learning_rate

        multiplier = float(self.params.get("backbone_lr_multiplier", 1.0))
        rate = current_learning_rate(runner)
        if multiplier == 1.0:
            return f" at the learning rate {rate:g} (the last step's)"
        return (f", the backbone at {multiplier:g} x the learning rate: {rate * multiplier:g} "
                f"({rate:g} at the last step)")

    def _scale_backbone(self, runner: Any) -> int:
        """Scale the backbone's gradients by backbone_lr_multiplier; how many trainable variables that slows
        (trial B14 could not tell from the log whether the setting took effect)."""
        multiplier = float(self.params.get("backbone_lr_multiplier", 1.0))
        if multiplier == 1.0:
            return 0
        from dsl.engine.gradient_scale import set_multipliers
        from dsl.networks import head_variable_names

        head = head_variable_names(runner.model)
        names = [v.name.rsplit(":", 1)[0] for v in runner.model.weights]
        set_multipliers(runner.model, {name: multiplier for name in names if name not in head})
        return sum(1 for v in runner.model.trainable_weights if v.name.rsplit(":", 1)[0] not in head)

    def _freeze_batch_norm(self, runner: Any) -> None:
        from dsl.callbacks._freeze import freeze_batch_norm

        frozen = freeze_batch_norm(runner.model)
        # Trial B11: 0.39 with it, 0.96 without, and nothing at the run said it could be the cause.
        runner.print(f"init_checkpoint: froze {len(frozen)} batch normalisation layers (freeze_batch_norm): they "
                     "normalise with the base data's statistics, which fit only images like the base's; if val "
                     "stays low, compare a run without it (docs/transfer-learning.md, Batch normalisation)")

    def _load(self, runner: Any) -> None:
        from dsl.callbacks._pretrained import read_stored, resolve
        from dsl.callbacks._restore_plan import plan_restore

        path = resolve(self.params["path"])
        stored = read_stored(runner.model, path)
        plan = plan_restore(runner.model, stored, path, self.params, self.skip_entries)
        for variable, value in plan.assignments:
            variable.assign(value.astype(variable.dtype.as_numpy_dtype))
        for line in plan.report():
            runner.print(line)
        for line in plan.warnings():
            runner.notice(f"warning: {line}")
        self._head_reset = list(plan.head_reset)
        self._origin = (path, plan)


    def _freeze(self, runner: Any) -> None:
        from dsl.callbacks._freeze import freeze_unmatched
        from dsl.callbacks._restore_plan import selectors

        frozen = freeze_unmatched(runner.model, selectors(runner.model, self.trainable_entries or [],
                                                          "init_checkpoint.trainable"))
        self._frozen = frozen
        trainable = len(runner.model.trainable_weights)
        runner.print(f"init_checkpoint: froze {len(frozen)} layers; {trainable} variables stay trainable")
        training = {variable.name.rsplit(":", 1)[0] for variable in runner.model.trainable_weights}
        still = [name for name in self._head_reset if name not in training]
        if still and self.params.get("unfreeze_after_epochs") is None:
            runner.notice(f"warning: init_checkpoint: the head was reset to fresh values ({', '.join(still[:3])}"
                          f"{', ...' if len(still) > 3 else ''}) but trainable does not select it: it keeps its random "
                          "values for the whole run; add head to init_checkpoint.trainable")


def plan_at_start(model: Any, params: dict[str, Any]) -> tuple[dict[str, str], str]:
    """What an init_checkpoint entry (`params`) does to `model` at the run's start, for `dslrun
    show --variables`: the freezing applied to `model`, where each variable's first value comes
    from by name (`restored`, `reset (head)`, `skipped`; absent: fresh), and a note. A checkpoint
    that does not fit raises the run's error."""
    from pathlib import Path

    from dsl.callbacks._freeze import freeze_batch_norm, freeze_unmatched
    from dsl.callbacks._pretrained import read_stored, resolve
    from dsl.callbacks._restore_plan import plan_restore, selectors

    origins: dict[str, str] = {}
    if Path(params["path"]).exists():
        path = resolve(params["path"])
        plan = plan_restore(model, read_stored(model, path), path, params, list(params.get("skip") or []))
        origins.update({variable.name.rsplit(":", 1)[0]: "restored" for variable, _ in plan.assignments})
        origins.update(dict.fromkeys(plan.head_reset, "reset (head)"))
        origins.update(dict.fromkeys(plan.skipped, "skipped"))
        note = f"first values from {path}"
    else:
        note = (f"init_checkpoint.path {params['path']} does not exist (yet): the run stops at its start until a run "
                "writes it, so the `first value` column is no plan: it cannot say what would be restored")
    if params.get("trainable") is not None:
        freeze_unmatched(model, selectors(model, list(params["trainable"]), "init_checkpoint.trainable"))
        if params.get("unfreeze_after_epochs") is not None:
            note += f"; every layer trains after {params['unfreeze_after_epochs']} epochs (unfreeze_after_epochs)"
    if params.get("freeze_batch_norm"):
        freeze_batch_norm(model)
    return origins, note


def _record_origin(model_dir: Any, given: str, path: str, plan: Any) -> None:
    """`init_checkpoint.json` in the run directory: the very file the run started from (`path:`
    names a run directory, whose newest checkpoint changes when that run trains on), with a digest
    of the values it restored, so the fine-tuned run says which weights it began with."""
    import json
    from pathlib import Path

    from dsl.engine.rundir import atomic_write_text

    record = {"path": given, "checkpoint": str(Path(path).resolve()), "sha256": restored_digest(plan.assignments),
              "restored": len(plan.assignments), "head_reset": list(plan.head_reset), "skipped": list(plan.skipped)}
    atomic_write_text(Path(model_dir) / "init_checkpoint.json", json.dumps(record, indent=1) + "\n")


def restored_digest(assignments: list[tuple[Any, Any]]) -> str:
    """sha256 of the restored variables' names, shapes and values, in name order: the same for two
    files that hold the same weights (a run's `best/ckpt-N` and `checkpoints/ckpt-N` differ in
    bytes, one holding the optimizer's state too: trial B10 read two digests as two weights)."""
    import hashlib

    digest = hashlib.sha256()
    for name, value in sorted((variable.name, value) for variable, value in assignments):
        digest.update(f"{name} {value.dtype} {value.shape}\n".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()
