"""Continuous evaluation: evaluate each checkpoint a training run writes, exactly once.

Used by `dslrun eval --watch FILE` (train in one process, watch in another) and by the
evaluator task of a parameter-server cluster. The watcher polls the run directory's
checkpoint list, evaluates every checkpoint it has not evaluated yet (oldest first), writes
an `eval` record to the metrics file and scalars to model_dir/tensorboard/eval, and stops
when the run is over:

- the chief writes `model_dir/DONE` (JSON: final step and checkpoint) when training ends
  normally, and removes it when a run starts; once the marker is there and every listed
  checkpoint is evaluated, the watcher stops;
- or a checkpoint at the run's final step (max_epochs x steps per epoch, or max_iters) was
  evaluated;
- or `timeout` seconds passed without a new checkpoint.

Checkpoints already recorded as `eval` in the metrics file are not evaluated again, so a
restarted watcher continues where it stopped. A checkpoint removed (max_to_keep) before
the watcher reached it is reported and skipped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Protocol

from dsl.engine.checkpointing import Checkpoints
from dsl.engine.contracts import RunnerView
from dsl.engine.phase_report import PhaseReport
from dsl.engine.rundir import MetricsFile, read_done


class Watcher(RunnerView, Protocol):
    """What continuous evaluation uses of the runner."""

    checkpoints: Checkpoints
    metrics_file: MetricsFile | None
    report: PhaseReport

    def evaluate(self, mode: str = "val", max_steps: int | None = None) -> dict[str, float]: ...
    def take_restored_position(self) -> None: ...

def list_checkpoints(directory: Path) -> list[str]:
    """Checkpoint prefixes CheckpointManager lists in `directory`, oldest first (complete ones only)."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(directory))
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths)
    resolved = [path if Path(path).is_absolute() else str(Path(directory) / path) for path in paths]
    return sorted((p for p in resolved if Path(f"{p}.index").exists()), key=_checkpoint_number)


def final_step(runner: Watcher) -> int | None:
    """The step a run of this pipeline ends at on one process (None when unknown)."""
    if runner.max_iters:
        return int(runner.max_iters)
    if runner.max_epochs and runner.steps_per_epoch:
        return int(runner.max_epochs) * int(runner.steps_per_epoch)
    return None


def watch(runner: Watcher, *, mode: str = "val", timeout: float | None = None, poll_seconds: float = 1.0) -> int:
    """Evaluate new checkpoints of `runner.model_dir` until the run ends; returns the exit status.

    Exit status 0 when the run's end was seen, 1 when `timeout` seconds passed without a new
    checkpoint (the records written until then stay).
    """
    directory = runner.model_dir / "checkpoints"
    evaluated = _already_evaluated(runner)
    last_step = final_step(runner)
    deadline = _deadline(timeout)
    seen_end = False
    runner.notice(f"watching {directory} for checkpoints to evaluate on the {mode} data")
    while not seen_end:
        done = read_done(runner.model_dir)  # read before listing: its checkpoints are then listed
        for path in list_checkpoints(directory):
            name = Path(path).name
            if name in evaluated:
                continue
            if evaluate_checkpoint(runner, path, mode):
                evaluated.add(name)
                deadline = _deadline(timeout)
                if last_step is not None and runner.step >= last_step:
                    seen_end = True
        if done is not None:
            seen_end = True
        if seen_end:
            break
        if deadline is not None and time.monotonic() > deadline:
            runner.notice(f"eval --watch: no new checkpoint in {timeout:g} s; stopping (the run is not over)")
            return 1
        time.sleep(poll_seconds)
    runner.notice(f"eval --watch: the run is over; evaluated {len(evaluated)} checkpoint(s)")
    return 0


def evaluate_checkpoint(runner: Watcher, path: str, mode: str) -> bool:
    """Restore `path`, evaluate, record; False when the checkpoint vanished before it was read."""
    import tensorflow as tf

    # The model and the position only: evaluation needs no optimizer, and the optimizer's
    # slots of a run with partitioned variables (ps cluster) do not fit a local optimizer.
    reader = runner.checkpoints.weights_reader()
    try:
        reader.restore(path).expect_partial()
    except (tf.errors.NotFoundError, ValueError) as exc:
        runner.notice(f"eval --watch: checkpoint {path} was removed before it was evaluated ({type(exc).__name__})")
        return False
    runner.take_restored_position()
    values = runner.evaluate(mode)
    name = Path(path).name
    runner.log_metrics("eval", {"checkpoint": name, "data": mode, **values, **runner.report.outputs()})
    runner.report.write(runner, mode, "eval", runner.step, f"{mode}, {name}")
    with runner.summary_writer("eval").as_default():
        for key, value in values.items():
            tf.summary.scalar(f"eval/{key}", value, step=runner.step)
    runner.summary_writer("eval").flush()
    if runner.placement.is_chief:
        print(json.dumps({"mode": "eval", "checkpoint": name, "step": runner.step, "epoch": runner.epoch, **values}),
              flush=True)
    return True


def _already_evaluated(runner: Watcher) -> set[str]:
    metrics = runner.metrics_file
    if metrics is None:
        return set()
    return {str(record["checkpoint"]) for record in metrics.read() if record.get("mode") == "eval" and record.get("checkpoint")}


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _checkpoint_number(path: str) -> int:
    try:
        return int(path.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1
