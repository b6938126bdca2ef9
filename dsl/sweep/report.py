"""What a sweep leaves for its user: the trials table, the best pipeline as YAML, plots as PNG.

`dslrun sweep FILE --status` prints it at any time, from any host that reaches the
storage; the sweep writes it when it ends. The best pipeline is the best trial's own
`trial.yaml` (the resolved pipeline it trained) with a run directory of its own, so
`dslrun best.yaml` trains it afresh (its header gives the command on the ranks a trial had).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import IO, Any

from dsl.sweep.plan import SweepPlan

PLOTS = ("optimization_history", "param_importances", "parallel_coordinate")
# Fewer finished trials than this make parameter importances (fANOVA over the trials) noise.
IMPORTANCE_TRIALS = 10


def status_rows(plan: SweepPlan, study: Any) -> list[list[str]]:
    """One row per trial: number, state, metric, duration, each parameter, reason."""
    from dsl.sweep.trial import shown_number

    rows = [["trial", "state", plan.metric, "seconds", *(s.path for s in plan.spaces), "reason"]]
    trials = study.get_trials(deepcopy=False)
    continued = {t.user_attrs.get("retry_of") for t in trials}  # interrupted attempts a re-run took over
    by_number = {t.number: t for t in trials}
    for trial in trials:
        if trial.number in continued:
            continue
        value = trial.value if trial.value is not None else (
            trial.intermediate_values[max(trial.intermediate_values)] if trial.intermediate_values else None)
        seconds = _seconds(trial, by_number)
        state = trial.state.name.lower()
        if state == "fail" and trial.user_attrs.get("interrupted"):
            state = "interrupted"
        rows.append([
            str(shown_number(trial)), state, "" if value is None else f"{value:.4g}",
            "" if seconds is None else f"{seconds:.1f}",
            *(_shown(trial.params.get(s.path)) for s in plan.spaces),
            trial.user_attrs.get("failure", "") if state in ("fail", "interrupted") else "",
        ])
    return rows


def _seconds(trial: Any, by_number: dict[int, Any]) -> float | None:
    """The trial's time, the attempts it continued (interrupted, then resumed) included."""
    seconds = trial.user_attrs.get("seconds")
    if seconds is None and trial.datetime_start is not None:
        end = trial.datetime_complete or datetime.datetime.now()
        seconds = (end - trial.datetime_start).total_seconds()
    before = by_number.get(trial.user_attrs.get("retry_of"))
    earlier = _seconds(before, by_number) if before is not None and before is not trial else None
    return seconds if earlier is None else (seconds or 0.0) + earlier


def _shown(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return "\n".join(lines)


def best_trial(study: Any) -> Any | None:
    try:
        return study.best_trial
    except ValueError:  # no finished trial yet
        return None


def write_best(plan: SweepPlan, trial: Any) -> Path | None:
    """The best trial's pipeline as `best.yaml` in the sweep directory, with a run directory of its own
    there (`best-run/`)."""
    source = Path(trial.user_attrs.get("run_dir", plan.trial_dir(trial.number))) / "trial.yaml"
    if not source.exists():
        return None
    import yaml

    from dsl.engine.rundir import atomic_write_text
    from dsl.language.pipeline import dump_pipeline

    pipeline = yaml.safe_load(source.read_text(encoding="utf-8"))
    # Beside the trials, wherever the sweep directory is: a relative path would follow the cwd.
    pipeline["runner"]["model_dir"] = str(plan.directory / "best-run")
    from dsl.sweep.trial import shown_number

    path = plan.directory / "best.yaml"
    header = (f"# The best trial (#{shown_number(trial)}) of sweep {plan.study_name}: {plan.metric} {trial.value:.6g}\n"
              f"# with {json.dumps(trial.params)}. Train it as its trials ran: {train_command(plan, path)}\n")
    atomic_write_text(path, header + dump_pipeline(pipeline))
    return path


def train_command(plan: SweepPlan, path: Path) -> str:
    """The command that trains `path` on the ranks a trial had (`horovodrun -np 2 dslrun run ...`):
    on one process a pipeline tuned on several would train on another batch per rank and sync."""
    import shlex
    import shutil
    import sys

    from dsl.sweep.trial import launcher

    command = launcher(plan, path, None)
    python = [sys.executable, "-m", "dsl"]
    at = next(i for i in range(len(command)) if command[i:i + 3] == python)
    if at and shutil.which(Path(command[0]).name) == command[0]:  # the launcher as typed, when PATH finds it
        command[0] = Path(command[0]).name
    return shlex.join([*command[:at], "dslrun", *command[at + 3:]])


def write_plots(plan: SweepPlan, study: Any) -> tuple[list[Path], list[str]]:
    """(PNG files written, why the others were not) from optuna.visualization.matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from optuna.visualization import matplotlib as plots
    except ImportError:
        return [], ["plots need matplotlib: pip install matplotlib (make install does)"]
    import warnings

    written, skipped = [], []
    for name in PLOTS:
        path = plan.directory / f"{name}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                axes = getattr(plots, f"plot_{name}")(study)
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            figure.set_size_inches(9, 5.5)
            figure.tight_layout()
            figure.savefig(path, dpi=100)
            plt.close(figure)
            written.append(path)
        except Exception as exc:  # Optuna refuses a plot its data cannot make (e.g. importances of one trial)
            skipped.append(f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}")
    return written, skipped


def write_report(plan: SweepPlan, study: Any, out: IO[str]) -> None:
    """The table, then the best trial and the files written for it."""
    out.write(format_table(status_rows(plan, study)) + "\n")
    reruns = {t.number: t.user_attrs["retry_of"] for t in study.get_trials(deepcopy=False) if "retry_of" in t.user_attrs}
    if reruns:  # Optuna numbers every attempt: the numbers of the re-runs are missing from the table
        shown = ", ".join(f"{number} (of trial {of})" for number, of in sorted(reruns.items()))
        out.write(f"re-runs of interrupted trials, shown under the trial they continue: {shown}; "
                  "the plots number them as Optuna does\n")
    best = best_trial(study)
    if best is None:
        out.write("no trial has finished yet\n")
        return
    from dsl.sweep.trial import shown_number

    out.write(f"best: trial {shown_number(best)}, {plan.metric} {best.value:.6g}, {json.dumps(best.params)}\n")
    path = write_best(plan, best)
    if path is not None:
        out.write(f"best pipeline: {path}\n")
    written, skipped = write_plots(plan, study)
    if written:
        out.write(f"plots: {', '.join(str(p) for p in written)}\n")
    for reason in skipped:
        out.write(f"plot not written: {reason}\n")
    for caution in (importance_caution(written, study), seed_caution(plan, path)):
        if caution:
            out.write(caution + "\n")


def importance_caution(written: list[Path], study: Any) -> str | None:
    """A word of caution when the importance plot stands on too few finished trials to mean much."""
    finished = sum(1 for trial in study.trials if trial.state.name == "COMPLETE")
    if not any(path.stem == "param_importances" for path in written) or finished >= IMPORTANCE_TRIALS:
        return None
    return (f"caution: param_importances.png is drawn from {finished} finished trial{'s' * (finished != 1)}; "
            f"importances mean little under {IMPORTANCE_TRIALS}")


def seed_caution(plan: SweepPlan, best: Path | None) -> str | None:
    """Every trial trains with the pipeline's one seed, so a gap between trials may be no more than
    another seed would give: trial A15's 10-epoch detector trials spread 0.12-0.29 in mAP, its seeds
    5 and 6 alone 0.24 and 0.42. Said beside the best, with the run that tells (None when the seed
    is itself a swept parameter)."""
    if any(space.path == "seed" for space in plan.spaces):
        return None
    seed = plan.pipeline.get("seed")
    other = seed + 1 if isinstance(seed, int) else 1
    rerun = f"dslrun run {best} --set seed={other}" if best is not None else f"the best trial with --set seed={other}"
    return (f"caution: every trial trained with seed {seed}; a gap between trials smaller than what another seed "
            f"gives is noise: before trusting it, run {rerun} (and the runner-up the same way) and compare")
