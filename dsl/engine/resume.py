"""Where a run starts: the newest usable checkpoint's weights, position and callback state.

Every rank ends up with the chief's view (a checkpoint may exist on one host only): the
weights, the position and three resume flags — resumed, val phases already done at the
restored step, a callback already ended the run — are broadcast together, so every rank
plans the same phases or none (a rank that went on alone would wait in a collective).
The files themselves are dsl/engine/checkpointing.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from dsl.engine.best import best_record
from dsl.engine.callback_list import CallbackList
from dsl.engine.checkpointing import Checkpoints, holds_training_state
from dsl.engine.contracts import Backend, RunnerView
from dsl.engine.phases import plan_phases
from dsl.engine.resume_state import read_state
from dsl.engine.run_state import Restored, RunState
from dsl.engine.rundir import read_done
from dsl.language.errors import DslError

ALL_PHASES = 1 << 30  # more val phases than any workflow runs at one position


class Restorable(RunnerView, Protocol):
    """What a restore reads of the runner (it returns what changes; the runner applies it)."""

    checkpoints: Checkpoints
    callback_list: CallbackList
    backend: Backend
    resume: bool
    resume_from: str | None
    resume_flags: Any  # tf.Variable [resumed, val phases done, stopped]
    state: dict[str, Any]  # the step/epoch/data_position variables of the checkpoint

    def state_variables(self) -> list[Any]: ...


def restore(runner: Restorable, weights_only: bool, option: str) -> Restored:
    """See `Runner.restore`."""
    checkpoints = runner.checkpoints
    candidates, explicit = checkpoints.candidates(runner.resume, runner.resume_from, option)
    if explicit and not holds_training_state(candidates[0]):
        return _restore_model_only(runner, candidates[0], option, weights_only)
    path = checkpoints.restore_newest_usable(candidates, explicit, weights_only, option)
    loaded_state, vals_done = _read_resume_state(runner, path) if not weights_only else (None, 0)
    flags = runner.resume_flags
    flags.assign([int(path is not None), vals_done, int(runner.should_stop)])
    runner.backend.broadcast(runner.state_variables() + list(runner.state.values()) + [flags])
    step, epoch, data_position = (int(runner.state[name].numpy()) for name in ("step", "epoch", "data_position"))
    resumed, vals_done, stopped = (int(value) for value in flags.numpy())
    listed = path is not None and checkpoints.is_listed(path)
    checkpoints.last_saved = (step, path, loaded_state) if listed and path else None
    if path and weights_only:
        runner.notice(f"using checkpoint {path} (step {step})")
    return Restored(path, bool(resumed), step, epoch, data_position, vals_done, bool(stopped), loaded_state,
                    step if path else None, epoch if path else None)


def _restore_model_only(runner: Restorable, path: str, option: str, weights_only: bool) -> Restored:
    """A checkpoint of the model alone (checkpoint.save_best's best/ckpt-N): it serves eval,
    predict and export; the step it was taken at comes from best.json beside it."""
    if not weights_only:
        raise DslError(
            f"{option} {path}: the checkpoint holds the model's weights only (as checkpoint.save_best writes "
            f"them), not the training state; resume from {runner.model_dir / 'checkpoints'}, or start a new "
            f"run from these weights with callbacks: [{{type: init_checkpoint, path: {path}}}]"
        )
    runner.checkpoints.restore_model(path, option)
    runner.backend.broadcast(list(runner.model.variables))
    record = best_record(path) or {}
    if "step" in record:
        value = record.get("value")
        shown = f"{value:.4f}" if isinstance(value, float) else value  # as the phase lines print it
        detail = f"step {record['step']}, best {record.get('monitor')} {shown}"
    else:
        detail = "step unknown: no best.json beside it describes it"
    runner.notice(f"using checkpoint {path} ({detail})")
    step, epoch = record.get("step"), record.get("epoch")
    return Restored(path, True, step or 0, epoch or 0, restored_step=step, restored_epoch=epoch)


def _read_resume_state(runner: Restorable, path: str | None) -> tuple[dict[str, Any] | None, int]:
    """The state file beside the checkpoint (the callbacks' state is loaded from it) and the
    val phases done at the restored step."""
    if path is None:
        return None, 0
    step = int(runner.state["step"].numpy())
    loaded = read_state(path, step)
    if loaded is None:
        return None, _vals_done_by_marker(runner, path, step)
    runner.callback_list.load_states(loaded.get("callbacks", {}), runner)
    return loaded, int(loaded.get("val_phases_done", 0))


def _vals_done_by_marker(runner: Restorable, path: str, step: int) -> int:
    """A checkpoint written before state files: when the run ended with it (model_dir/DONE
    names it), every phase at its step ran."""
    done = read_done(runner.model_dir)
    if done and done.get("step") == step and done.get("checkpoint") == Path(path).name \
            and runner.checkpoints.is_listed(path):
        return ALL_PHASES
    return 0


class Finishable(Protocol):
    """What deciding that a resumed run is over reads."""

    run_state: RunState
    model_dir: Path
    by_epoch: bool
    max_epochs: int | None
    max_iters: int | None
    workflow: list[tuple[str, int]]

    @property
    def should_stop(self) -> bool: ...
    @property
    def stop_reason(self) -> str: ...


def finished(runner: Finishable) -> str | None:
    """Why a resumed run has nothing left to do, or None. Every rank decides alike: the
    position and the resume flags are the chief's (broadcast by `restore`)."""
    state = runner.run_state
    if not state.resumed:
        return None
    where = f"already finished at step {state.step} ({runner.model_dir})"
    if runner.should_stop:  # a callback's restored state ends the run (early stopping's patience is spent)
        return f"{where}: {runner.stop_reason}"
    if runner.by_epoch:
        key, unit, total, done = "max_epochs", "epoch", runner.max_epochs or 0, state.epoch
    else:
        key, unit, total, done = "max_iters", "step", runner.max_iters or 0, state.step
    if done < total or (done == total and state.vals_done < _val_phases_at(runner, total)):
        return None
    if done > total:
        return f"{where}: it is at {unit} {done}, beyond runner.{key} {total}; raise runner.{key} to train further"
    return f"{where}; raise runner.{key} ({total}) to train further"


def _val_phases_at(runner: Finishable, units: int) -> int:
    """How many val phases the workflow runs when `units` train units are done."""
    plan = plan_phases(runner.workflow, runner.max_epochs or runner.max_iters or 0, runner.by_epoch)
    return sum(1 for phase in plan if phase.mode == "val" and phase.start == units)
