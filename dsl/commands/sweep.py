"""`dslrun sweep FILE`: tune a pipeline's settings with the trials its `sweep:` section declares.

Re-running the command resumes the study; `--status` prints the trials, writes the best
pipeline and the plots, and runs nothing.
"""

from __future__ import annotations

import sys

import click

from dsl.commands._common import load_or_exit, set_option


@click.command("sweep")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@set_option
@click.option("--status", is_flag=True, help="Print the trials table, write best.yaml and the plots; start nothing.")
def command(path: str, overrides: tuple[str, ...], status: bool) -> None:
    """Run (or resume) the Optuna study of the `sweep:` section in FILE; each trial is a dslrun run.

    Trials run in their own run directories under the sweep directory (sweep.directory,
    default runs/<name>-sweep), started the way runner.backend runs; the study lives in
    sweep.storage (default: study.db there). Ctrl-C stops the trials; the same command
    resumes. Exit status: 0 done, 1 an error or max_failed_trials reached, 130 interrupted.
    """
    # Starting trials: a tracking server must answer now, or the sweep's own MLflow run would wait on it.
    pipeline = load_or_exit(path, overrides, starting=not status)
    from dsl.language.errors import DslError

    if not isinstance(pipeline.get("sweep"), dict):
        raise DslError(f"{path} has no sweep: section; add one (parameters, metric, ...), or a sweep file that "
                       "extends this pipeline (see docs/sweeps.md)")
    from dsl.sweep.plan import SweepPlan

    plan = SweepPlan.read(path, overrides, pipeline)
    plan.plugins = tuple(click.get_current_context().params.get("plugins") or ())  # each trial imports them too
    if status:
        from dsl.sweep.driver import open_study
        from dsl.sweep.report import write_report

        write_report(plan, open_study(plan, create=False), out=sys.stdout)
        return
    from dsl.sweep.driver import run_sweep

    sys.exit(run_sweep(plan))
