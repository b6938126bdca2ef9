"""Where a run starts: the newest usable checkpoint's weights, position and callback state.

Every rank ends up with the chief's view (a checkpoint may exist on one host only): the
weights, the position and three resume flags — resumed, val phases already done at the
restored step, a callback already ended the run — are broadcast together, so every rank
plans the same phases or none (a rank that went on alone would wait in a collective).
The files themselves are dsl/engine/checkpointing.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsl.engine.checkpointing import holds_training_state
from dsl.engine.phases import plan_phases
from dsl.engine.resume_state import read_state
from dsl.engine.watch import read_done
from dsl.errors import DslError

if TYPE_CHECKING:
    from dsl.engine.runner import Runner

ALL_PHASES = 1 << 30  # more val phases than any workflow runs at one position


def restore(runner: Runner, weights_only: bool, option: str) -> None:
    """See `Runner.restore`."""
    checkpoints = runner.checkpoints
    candidates, explicit = checkpoints.candidates(runner.resume, runner.resume_from, option)
    if explicit and not holds_training_state(candidates[0]):
        _restore_model_only(runner, candidates[0], option, weights_only)
        return
    path = checkpoints.restore_newest_usable(candidates, explicit, weights_only, option)
    runner.restored_from = path
    vals_done = _read_resume_state(runner, path) if not weights_only else 0
    flags = runner.resume_flags
    flags.assign([int(path is not None), vals_done, int(runner.should_stop)])
    state = runner.state
    runner.backend.broadcast(runner.state_variables() + list(state.values()) + [flags])
    runner.step = int(state["step"].numpy())
    runner.epoch = int(state["epoch"].numpy())
    runner.data_position = int(state["data_position"].numpy())
    resumed, runner.vals_done, stopped = (int(value) for value in flags.numpy())
    runner.resumed = bool(resumed)
    if stopped and not runner.should_stop:
        runner.request_stop("a callback of the chief ended the run")
    listed = path is not None and checkpoints.is_listed(path)
    runner.checkpoints.last_saved = (runner.step, path, runner.loaded_state) if listed and path else None
    if path:
        runner.restored_step, runner.restored_epoch = runner.step, runner.epoch
    if path and weights_only:
        runner.notice(f"using checkpoint {path} (step {runner.step})")


def _restore_model_only(runner: Runner, path: str, option: str, weights_only: bool) -> None:
    """A checkpoint of the model alone (checkpoint.save_best's best/ckpt-N): it serves eval,
    predict and export; the step it was taken at comes from best.json beside it."""
    from dsl.callbacks._best import record_of

    if not weights_only:
        raise DslError(
            f"{option} {path}: the checkpoint holds the model's weights only (as checkpoint.save_best writes "
            f"them), not the training state; resume from {runner.model_dir / 'checkpoints'}, or start a new "
            f"run from these weights with callbacks: [{{type: init_checkpoint, path: {path}}}]"
        )
    runner.checkpoints.restore_model(path, option)
    runner.backend.broadcast(list(runner.model.variables))
    record = record_of(path) or {}
    runner.resumed, runner.restored_from = True, path
    runner.restored_step, runner.restored_epoch = record.get("step"), record.get("epoch")
    runner.step, runner.epoch = runner.restored_step or 0, runner.restored_epoch or 0
    if "step" in record:
        detail = f"step {record['step']}, best {record.get('monitor')} {record.get('value')}"
    else:
        detail = "step unknown: no best.json beside it describes it"
    runner.notice(f"using checkpoint {path} ({detail})")


def _read_resume_state(runner: Runner, path: str | None) -> int:
    """Load the callbacks' state from the file beside the checkpoint; returns the val phases
    done at the restored step."""
    runner.loaded_state = None
    if path is None:
        return 0
    step = int(runner.state["step"].numpy())
    runner.loaded_state = read_state(path, step)
    if runner.loaded_state is None:
        return _vals_done_by_marker(runner, path, step)
    runner.callback_list.load_states(runner.loaded_state.get("callbacks", {}), runner)
    return int(runner.loaded_state.get("val_phases_done", 0))


def _vals_done_by_marker(runner: Runner, path: str, step: int) -> int:
    """A checkpoint written before state files: when the run ended with it (model_dir/DONE
    names it), every phase at its step ran."""
    done = read_done(runner.model_dir)
    if done and done.get("step") == step and done.get("checkpoint") == Path(path).name \
            and runner.checkpoints.is_listed(path):
        return ALL_PHASES
    return 0


def finished(runner: Runner) -> str | None:
    """Why a resumed run has nothing left to do, or None. Every rank decides alike: the
    position and the resume flags are the chief's (broadcast by `restore`)."""
    if not runner.resumed:
        return None
    where = f"already finished at step {runner.step} ({runner.model_dir})"
    if runner.should_stop:  # a callback's restored state ends the run (early stopping's patience is spent)
        return f"{where}: {runner.stop_reason}"
    if runner.by_epoch:
        key, unit, total = "max_epochs", "epoch", runner.max_epochs or 0
    else:
        key, unit, total = "max_iters", "step", runner.max_iters or 0
    done = runner.units_done()
    if done < total or (done == total and runner.vals_done < _val_phases_at(runner, total)):
        return None
    if done > total:
        return f"{where}: it is at {unit} {done}, beyond runner.{key} {total}; raise runner.{key} to train further"
    return f"{where}; raise runner.{key} ({total}) to train further"


def _val_phases_at(runner: Runner, units: int) -> int:
    """How many val phases the workflow runs when `units` train units are done."""
    plan = plan_phases(runner.workflow, runner.max_epochs or runner.max_iters or 0, runner.by_epoch)
    return sum(1 for phase in plan if phase.mode == "val" and phase.start == units)


def phase_epoch(runner: Runner, partial: bool) -> dict[str, Any]:
    """The epoch a phase's record is filed under: the complete epochs, or for a `partial` phase (a
    stop or a signal cut it short) `"partial": true` and the epoch reached as a fraction (1.4 = 40%
    into the second), rather than the last complete epoch's number, whose record it would repeat."""
    if not partial:
        return {"epoch": runner.epoch}
    share = runner.data_position / runner.steps_per_epoch if runner.steps_per_epoch else 0.0
    return {"epoch": round(runner.epoch + share, 4), "partial": True}
