"""`train_basic` and `val_basic`: the run's header and closing lines, and a one-line val report.

The runner already appends every phase's values to the metrics file; these callbacks are
what a person watching the console reads.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from dsl.callbacks._common import format_value, format_values, phase_position, save_checkpoint
from dsl.distributed.scaling import warmup_steps
from dsl.engine.hooks import Callback
from dsl.language.context import BuildContext
from dsl.language.registry import register


def _count(variables: list[Any]) -> int:
    return sum(math.prod(int(d) for d in v.shape) for v in variables)


def _scaling(runner: Any) -> str:
    """Global batch, learning rate and warmup at this world size: what moving a pipeline to N
    ranks changed, said where the run starts (dsl/distributed/scaling.py), and the schedule's drops."""
    from dsl.modelers.base import describe_schedule

    base = runner.modeler.params["optimizer"]["learning_rate"]
    text = runner.scaling.describe(base)
    warmup = warmup_steps(runner.pipeline, runner.steps_per_epoch)
    if warmup:
        text += f", warmup {warmup} step{'s' * (warmup != 1)}"
    schedule = describe_schedule(runner.modeler.params.get("lr_schedule") or {})
    if schedule:
        text += f", {schedule}"
    synced = runner.batch_norm_sync.describe() if runner.batch_norm_sync else ""
    return f"{text}, {synced}" if synced else text


@register("callback", "train_basic", params={}, unique=True)
class TrainBasic(Callback):
    """Print the run's header (pipeline, parameters, steps per epoch, world size) and save the final checkpoint.

    Header at the start; at the end the last state is saved so a finished run can always be resumed or evaluated.
    """

    priority = "BELOW_NORMAL"
    chief_only = True

    def before_run(self, runner: Any) -> None:
        model = runner.model
        total, trainable = _count(model.weights), _count(model.trainable_weights)
        length = f"max_epochs {runner.max_epochs}" if runner.by_epoch else f"max_iters {runner.max_iters}"
        runner.print(
            f"pipeline {runner.pipeline.name}: {total:,} parameters ({trainable:,} trainable), "
            f"{runner.steps_per_epoch or '?'} steps/epoch, {_scaling(runner)}, {length}, model_dir {runner.model_dir}"
        )

    def after_run(self, runner: Any) -> None:
        if runner.failed:
            runner.print(f"run failed at step {runner.step}; no checkpoint of this state was saved")
            return
        path = save_checkpoint(runner)
        if "interrupted" in runner.stop_reason:
            return  # the runner says it: "interrupted by SIGINT: saved a checkpoint at step N in ..."
        done = "stopped" if runner.stop_reason else "finished"
        runner.print(f"{done} at step {runner.step} (epoch {runner.epoch}); checkpoint {path}")


@register(
    "callback",
    "val_basic",
    aliases=("eval_basic",),  # its former name, before it matched the workflow's `val`
    params={},
    unique=True,
)
class ValBasic(Callback):
    """Print one line with every validation output after each validation phase, and the best accuracy so far; at the end, say
    when the task's score was still rising over the last 3 phases.

    `val epoch 3/10 (step 1170): loss 0.8123, accuracy 0.7012 (best accuracy 0.7012 at step 1170)`.
    """

    priority = "VERY_LOW"
    chief_only = True

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        super().__init__(params, context)
        self.best: tuple[float, int] | None = None
        self.scores: list[tuple[str, float]] = []  # this process's val phases: the task's headline score

    def before_save_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        if self.best is not None:
            state.update(accuracy=self.best[0], step=self.best[1])

    def after_load_checkpoint(self, runner: Any, state: dict[str, Any]) -> None:
        """A resumed run's best line covers the whole run, not only what this process saw."""
        if state.get("accuracy") is not None:
            self.best = (float(state["accuracy"]), int(state["step"]))

    def after_val_epoch(self, runner: Any) -> None:
        values = runner.phase_outputs
        line = f"val {phase_position(runner)}: {format_values(values)}"
        score = next((key for key in SCORES if values.get(key) is not None), None)
        if score is not None and math.isfinite(float(values[score])):
            self.scores.append((score, float(values[score])))
        accuracy = values.get("accuracy")
        if accuracy is not None and math.isfinite(accuracy):
            if self.best is None or accuracy > self.best[0]:
                self.best = (float(accuracy), runner.step)
            line += f" (best accuracy {format_value(self.best[0])} at step {self.best[1]})"
        runner.print(line)

    def after_run(self, runner: Any) -> None:
        if self.best is not None:
            runner.print(f"best val accuracy {format_value(self.best[0])} at step {self.best[1]}{_kept(runner, self.best[1])}")
        rising = still_rising(self.scores)
        if rising and not runner.failed and not runner.stop_reason:
            length = ("runner.max_epochs", runner.max_epochs) if runner.by_epoch else ("runner.max_iters", runner.max_iters)
            runner.notice(f"val/{rising}: the run likely ended before its best; "
                          f"raise {length[0]} ({length[1]}) and run it again, and it continues from its last checkpoint")


def _kept(runner: Any, step: int) -> str:
    """Whether the best step's model can be had back (`--checkpoint best`): a run without
    `save_best` printed its best line too, and trial B16 then met "has no best model"."""
    from pathlib import Path

    from dsl.engine.best import BEST_DIR, read_best

    record = read_best(Path(runner.model_dir))
    if record is None:
        return " (not kept: add save_best to the checkpoint callback to keep the best model for --checkpoint best)"
    if record.get("step") == step:
        return f" (kept in {Path(runner.model_dir) / BEST_DIR})"
    return ""  # save_best follows another monitor: best/ holds its best, said where it was written


# Each task's headline val score (higher is better): classification, detection, segmentation, translation.
SCORES = ("accuracy", "map", "mean_iou", "bleu")
RISING = 3  # val phases in a row
FAR_BELOW = 0.9  # a score under this still rising has room, even as its gains shrink


def still_rising(scores: list[tuple[str, float]]) -> str | None:
    """`"map rose 0.21 -> 0.25 -> 0.28 over the last 3 val phases"` when the run likely ended before
    its best, else None. Either the last RISING val scores each beat the one before, and the last gain
    is at least half the one before it (still climbing, not levelling off) or the score is still far
    below its ceiling (under FAR_BELOW): a trial's detector ended at 0.28 after 12 epochs, 0.71 after
    30, and another's mAP rose 0.088 -> 0.107 -> 0.112 in 6 epochs (0.66 after 30); the quickstart's
    0.20 -> 0.83 -> 0.97 levels off near its ceiling and says nothing. Or, noisier: below FAR_BELOW,
    the run's best came in one of its last two phases, RISING phases after a score at least a tenth
    lower (trial A14's mAP set its best at epoch 7 of 8, 0.03 -> 0.13, then dipped, and nothing was
    said; it reached 0.65 at 30). A score wavering near a ceiling of its own gains less than that."""
    last = scores[-RISING:]
    if len(last) < RISING or len({key for key, _ in last}) != 1:
        return None
    values = [value for _, value in last]
    gains = [after - before for before, after in itertools.pairwise(values)]
    if all(gain > 0 for gain in gains) and (gains[-1] >= gains[-2] / 2 or values[-1] < FAR_BELOW):
        return f"{last[0][0]} rose {' -> '.join(format_value(value) for value in values)} over the last {RISING} val phases"
    window = scores[-(RISING + 1):]
    if len(window) <= RISING or len({key for key, _ in window}) != 1:
        return None
    values = [value for _, value in window]
    best = max(value for key, value in scores if key == window[0][0])
    if best >= FAR_BELOW or best not in values[-2:] or values[-1] <= values[0] or best - values[0] < best / 10:
        return None
    return (f"{window[0][0]} rose {' -> '.join(format_value(value) for value in values)} over the last {RISING + 1} "
            f"val phases (its best, {format_value(best)}, in the last two)")
