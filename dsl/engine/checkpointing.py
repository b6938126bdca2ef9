"""The run's checkpoints: which one to resume from, reading it (or the one before), writing one.

One `tf.train.Checkpoint` holds every tensor a restart needs (model, optimizer, step, data
epoch and position, dropout RNG); `CheckpointManager` writes it atomically and keeps
`runner.max_to_keep`. Beside each lies the JSON the tensors cannot hold (resume_state.py).
The loop decides *when* to save and what the position is; this module knows the files:
a damaged newest checkpoint falls back to the one before it, a checkpoint the user named
is used or refused (never replaced), and `--no-resume` sets old checkpoints aside.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from dsl.engine.resume_state import sweep_states, write_state
from dsl.language.context import Placement
from dsl.language.errors import DslError


class Checkpoints:
    """The training checkpoints of one run directory (`model_dir/checkpoints`).

    `objects` are the trackables of a training checkpoint; `model` and `position` (the step,
    epoch and data-position variables) are what eval, predict and export read.
    """

    def __init__(self, objects: dict[str, Any], model_dir: Path, max_to_keep: int, placement: Placement,
                 notice: Callable[[str], None]) -> None:
        self.objects = objects
        self.directory = model_dir / "checkpoints"
        self.max_to_keep = max_to_keep
        self.placement = placement
        self.notice = notice
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = self._manager()
        # (step, checkpoint, its state file's content) of the last save or of the restored one
        self.last_saved: tuple[int, str, dict[str, Any] | None] | None = None

    def _manager(self) -> tf.train.CheckpointManager:
        return tf.train.CheckpointManager(self.checkpoint, str(self.directory), max_to_keep=self.max_to_keep)

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint  # type: ignore[no-any-return]

    def save(self, position: dict[str, int], state: dict[str, Any]) -> str:
        """Write checkpoint `ckpt-<step>` of `position` (step, epoch, data_position) with `state`
        beside it; returns its prefix.

        Called again at the same step (the val phase after an epoch's checkpoint, the final
        save), only the state file beside the checkpoint is replaced, if it changed.
        """
        step = position["step"]
        if self.last_saved is not None and self.last_saved[0] == step:
            _, previous, previous_state = self.last_saved
            if state != previous_state:
                write_state(previous, state)
                self.last_saved = (step, previous, state)
            return previous
        for name, value in position.items():
            self.objects[name].assign(value)
        # Before the checkpoint: CheckpointManager lists it last, so a listed checkpoint has its state.
        write_state(self.directory / f"ckpt-{step}", state)
        path: str = self.manager.save(checkpoint_number=step)
        sweep_states(self.directory, self.manager.checkpoints)
        self.last_saved = (step, path, state)
        return path

    def candidates(self, resume: bool, resume_from: str | None, option: str) -> tuple[list[str], bool]:
        """The checkpoints to try, newest first, and whether the user named the one to use (with `option`)."""
        if resume_from:
            return [resolve_checkpoint(resume_from, option)], True
        if not resume:
            self._set_aside_old()
            return [], False
        listed = list(self.manager.checkpoints)
        if self.latest and self.latest not in listed:
            listed.append(self.latest)
        return listed[::-1], False

    def _set_aside_old(self) -> None:
        """--no-resume: keep the old run's checkpoints, best model, metrics and TensorBoard events
        (renamed with the same time stamp) instead of mixing the new run into them (two runs'
        curves drawn over each other) or deleting them."""
        directory = self.directory
        if not self.placement.is_chief:
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if directory.exists() and any(directory.iterdir()):
            target = directory.with_name(f"checkpoints.old-{stamp}")
            directory.rename(target)
            self.notice(f"--no-resume: moved the old checkpoints to {target}")
            self.manager = self._manager()
        moved = [set_aside(path, stamp) for path in self._old_results()]
        if moved:
            self.notice(f"--no-resume: moved the old {', '.join(p.name.split('.')[0] for p in moved)} to "
                        f"{', '.join(str(p) for p in moved)}")

    def _old_results(self) -> list[Path]:
        """What a former run left beside its checkpoints that a new run would mix into or replace."""
        model_dir = self.directory.parent
        paths = [model_dir / "best", model_dir / "metrics.jsonl", model_dir / "metrics.csv", model_dir / "tensorboard"]
        return [path for path in paths if path.exists()]

    def restore_newest_usable(self, candidates: list[str], explicit: bool, weights_only: bool, option: str) -> str | None:
        """The first of `candidates` that restores; damaged ones are skipped unless the user named it.

        `weights_only` reads the model and the position and leaves the optimizer alone.
        """
        reader = self.weights_reader() if weights_only else self.checkpoint
        for candidate in candidates:
            problem = self._restore_from(candidate, reader, weights_only, option)
            if problem is None:
                return candidate
            if explicit:
                fresh = ", or --no-resume to start fresh" if option == "--resume-from" else ""
                raise DslError(f"{option} {candidate}: the checkpoint cannot be read ({problem}); "
                               f"give another checkpoint{fresh}")
            self.notice(f"warning: checkpoint {candidate} cannot be read ({problem}); trying the one before it")
        if candidates:
            raise DslError(
                f"no usable checkpoint in {self.directory}: all {len(candidates)} listed in its `checkpoint` file are "
                f"damaged or missing; move the directory aside and rerun to start fresh, or pass {option} PATH"
            )
        return None

    def restore_model(self, path: str, option: str) -> None:
        """Read the model alone from `path` (a checkpoint of the model only, as best/ holds)."""
        problem = self._restore_from(path, tf.train.Checkpoint(model=self.objects["model"]), True, option)
        if problem is not None:
            raise DslError(f"{option} {path}: the checkpoint cannot be read ({problem}); give another checkpoint")

    def weights_reader(self) -> tf.train.Checkpoint:
        """A reader of the model and the position in a training checkpoint, without the optimizer."""
        keep = ("model", "step", "epoch", "data_position")
        return tf.train.Checkpoint(**{name: self.objects[name] for name in keep})

    def listed(self) -> list[str]:
        """The run directory's training checkpoints, oldest first (what `checkpoint.max_to_keep` kept)."""
        return list(self.manager.checkpoints)

    def is_listed(self, path: str) -> bool:
        """Whether `path` is one of this run directory's checkpoints."""
        listed = {Path(p).resolve() for p in self.manager.checkpoints}
        return Path(path).resolve() in listed

    def _restore_from(self, path: str, reader: tf.train.Checkpoint, partial: bool, option: str) -> str | None:
        """Load `reader`'s variables from `path`; None on success, else why the files are unusable.

        A checkpoint that reads fine but does not fit the pipeline is an error, not damage:
        older checkpoints would not fit either. A read that fails half-way may have set some
        variables; the next candidate sets every one of them again (each checkpoint holds
        all training state), so nothing of the damaged one survives.
        """
        try:
            status = reader.restore(path)
        except ValueError as exc:
            if "incompatible tensor with shape" in str(exc):
                raise does_not_fit(path, exc, option) from None
            return f"{type(exc).__name__}: {first_line(exc)}"
        except (tf.errors.OpError, IndexError, KeyError, OSError) as exc:
            # What TensorFlow's reader raises for missing, truncated and garbled files.
            return f"{type(exc).__name__}: {first_line(exc)}"
        if partial:
            status.expect_partial()
        try:
            status.assert_existing_objects_matched()
        except AssertionError as exc:
            raise does_not_fit(path, exc, option) from None
        return None


def does_not_fit(path: str, exc: Exception, option: str) -> DslError:
    """The error for a readable checkpoint of another network or optimizer.

    The half-done restore leaves TensorFlow a "value ... could not be found" warning per
    variable to log when its objects are deleted, after the error line: 84 of them buried
    the one line that says what to do (trial A6). They are dropped from then on.
    """
    tf.get_logger().addFilter(_unrestored_values)
    if option == "--resume-from":
        hint = "use --no-resume or another runner.model_dir"
    else:
        hint = f"pass {option} with a checkpoint of this pipeline's network"
    return DslError(
        f"checkpoint {path} does not fit this pipeline (the network or optimizer changed?): "
        f"{first_line(exc)}; {hint}"
    )


def _unrestored_values(record: Any) -> bool:
    message = record.getMessage()
    return not ("could not be found in the restored object" in message
                or "being deleted with unrestored values" in message)


def random_generators(model: tf.keras.Model) -> list[tf.random.Generator]:
    """The `tf.random.Generator` of every layer that draws random numbers (dropout), in layer order.

    Keras keeps them out of the model's checkpoint; the runner saves them itself, so that a
    resumed deterministic run draws the same dropout masks as an uninterrupted one.
    """
    found = []
    for layer in model.submodules:
        generator = getattr(getattr(layer, "_random_generator", None), "_generator", None)
        if isinstance(generator, tf.random.Generator):
            found.append(generator)
    return found


def holds_training_state(path: str) -> bool:
    """Whether `path` is a training checkpoint (with the position), not one of the model alone (best/)."""
    try:
        names = {name for name, _ in tf.train.list_variables(path)}
    except (tf.errors.OpError, ValueError, OSError):
        return True  # unreadable: restoring it says why
    return "step/.ATTRIBUTES/VARIABLE_VALUE" in names


def set_aside(path: Path, stamp: str) -> Path:
    """Rename `path` to `<stem>.old-<stamp><suffix>` (best -> best.old-…, metrics.jsonl -> metrics.old-….jsonl)."""
    target = path.with_name(f"{path.stem}.old-{stamp}{path.suffix}")
    path.rename(target)
    return target


def resolve_checkpoint(path: str, option: str) -> str:
    """A checkpoint prefix from a prefix (or its .index or data file) or a directory; an error when there is none."""
    from dsl.engine.checkpoint_paths import given_checkpoint

    candidate = given_checkpoint(path, option)
    if Path(candidate).is_dir():
        latest: str | None = tf.train.latest_checkpoint(candidate)
        if latest is None:
            raise DslError(f"{option} {path}: the directory holds no checkpoint")
        return latest
    return candidate


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, without TensorFlow's op details."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)  # where in TensorFlow, not what
    return message.strip().splitlines()[0].split(" [Op:")[0]
