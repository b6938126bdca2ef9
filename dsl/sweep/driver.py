"""`dslrun sweep FILE`: an Optuna study driven by ask and tell, one process tree per trial.

The loop runs in one thread: it starts trials while slots and the budget allow, reads each
running trial's metric after every val phase (rank 0's metrics file), reports it to the
study and stops a trial the pruner gives up on, then tells the study how each trial ended.
A trial that crashes, runs past `trial_timeout_seconds` or ends without the metric is
failed with the reason (user attribute `failure`), and the sweep goes on until
`max_failed_trials`.

Resuming is re-running the command: the study is loaded from its storage; finished trials
count, and a trial interrupted by Ctrl-C (or whose driver died: no heartbeat) is asked again
with the same values in the same run directory, so dslrun resumes it from its checkpoint.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from dsl.language.errors import DslError
from dsl.sweep.checks import available_slots
from dsl.sweep.plan import SweepPlan
from dsl.sweep.space import override
from dsl.sweep.trial import TrialProcess, launcher, shown_number

POLL_SECONDS = 0.5
HEARTBEAT_SECONDS = 30
INTERRUPTED = "interrupted"


def say(message: str) -> None:
    click.echo(f"dslrun sweep: {message}", err=True)


def open_study(plan: SweepPlan, create: bool = True) -> Any:
    """The study in its storage (created on the first run, loaded on the next)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Heartbeats and stale-trial recovery are "experimental" in Optuna and "meant for optimize()": both
    # are what resuming an ask-and-tell study needs, and their warnings would only confuse the user.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage")
    if plan.storage.startswith("sqlite:///"):
        plan.directory.mkdir(parents=True, exist_ok=True)
    try:
        storage = optuna.storages.RDBStorage(plan.storage, heartbeat_interval=HEARTBEAT_SECONDS,
                                             grace_period=4 * HEARTBEAT_SECONDS)
    except Exception as exc:  # SQLAlchemy's errors: a bad URL, a missing driver, a server that does not answer
        if isinstance(exc, ImportError) or "DB access module" in str(exc):
            raise DslError(f"cannot open the study's storage {_shown_url(plan.storage)}: its database driver is not "
                           'installed; for postgresql:// install it with: pip install "dslrun[postgres]" (psycopg)') from None
        raise DslError(f"cannot open the study's storage {_shown_url(plan.storage)}: {_first_line(exc)}; "
                       "check sweep.storage (a SQLAlchemy URL) and that its database server runs") from None
    if not create:
        try:
            return optuna.load_study(study_name=plan.study_name, storage=storage, sampler=_sampler(plan),
                                     pruner=_pruner(plan))
        except KeyError:
            raise DslError(f"no study {plan.study_name!r} in {_shown_url(plan.storage)} yet; start it with "
                           f"dslrun sweep {plan.file}") from None
    study = optuna.create_study(study_name=plan.study_name, storage=storage, sampler=_sampler(plan),
                                pruner=_pruner(plan), direction="maximize" if plan.goal == "max" else "minimize",
                                load_if_exists=True)
    before = len(study.get_trials(deepcopy=False))
    if before:
        study.sampler = _sampler(plan, before)
    return study


def _shown_url(url: str) -> str:
    """The storage URL without a password."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, credentials = head.partition("://")
    return f"{scheme}://{credentials.partition(':')[0]}@{tail}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _sampler(plan: SweepPlan, trials_before: int = 0) -> Any:
    """The sampler of `sweep.method`. A study resumed with `trials_before` trials gets a seed drawn
    from (sweep.seed, trials_before): the seed itself would replay the first run's suggestions, and
    a resumed sweep spent its trials on configurations it had already tried."""
    import numpy as np
    import optuna

    method, seed = plan.sweep.get("method", "tpe"), plan.sweep.get("seed")
    if seed is not None and trials_before:
        seed = int(np.random.SeedSequence([int(seed), trials_before]).generate_state(1)[0])
    if method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if method == "grid":
        return optuna.samplers.GridSampler({s.path: s.grid_values() for s in plan.spaces}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def _pruner(plan: SweepPlan) -> Any:
    import optuna

    rule = plan.sweep.get("early_stopping")
    if not isinstance(rule, dict):
        return optuna.pruners.NopPruner()
    if rule["type"] == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=rule.get("startup_trials", 2),
                                           n_warmup_steps=warmup_phases(plan))
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=rule.get("min_resource", 1),
                                                  reduction_factor=rule.get("reduction_factor", 3))


def warmup_phases(plan: SweepPlan) -> int:
    """Val phases a trial runs before the median rule may stop it: `early_stopping.warmup_phases`, or
    a third of the trial's val phases. In a trial's first epochs every trial is near chance (a
    sweep of 5 short trials lost 3 at 0.12-0.20 with a warm-up of 1), so comparing there prunes at random."""
    written = (plan.sweep.get("early_stopping") or {}).get("warmup_phases")
    if written is not None:
        return int(written)
    return max(1, val_phases(plan.pipeline["runner"]) // 3)


def val_phases(runner: dict[str, Any]) -> int:
    """The val phases a run of `runner` makes: its workflow's val phases once per train cycle."""
    workflow = [(str(mode), int(count)) for mode, count in runner.get("workflow") or [["train", 1]]]
    trains = sum(count for mode, count in workflow if mode == "train") or 1
    vals = sum(count for mode, count in workflow if mode == "val")
    length = runner.get("max_epochs") or runner.get("max_iters") or 0
    return int(length) // trains * vals


def budget(plan: SweepPlan) -> int:
    """max_trials, or the grid's size when a grid is smaller."""
    most = int(plan.sweep.get("max_trials", 20))
    if plan.sweep.get("method") == "grid":
        size = 1
        for space in plan.spaces:
            size *= len(space.grid())
        most = min(most, size)
    return most


def is_retried(trial: Any) -> bool:
    """A trial that ended without a judgement of its own (Ctrl-C, its driver died): it is run again."""
    from optuna.trial import TrialState

    return trial.state == TrialState.FAIL and (trial.user_attrs.get(INTERRUPTED) or "failure" not in trial.user_attrs)


class Sweep:
    """One run of `dslrun sweep`: the study, the trials running, and the counts that end it."""

    def __init__(self, plan: SweepPlan) -> None:
        self.plan = plan
        self.study = open_study(plan)
        self.running: dict[int, tuple[Any, TrialProcess]] = {}
        self.free_hosts = _slot_list(plan.sweep.get("hosts"))
        self.timeout = plan.sweep.get("trial_timeout_seconds")
        self.max_failed = int(plan.sweep.get("max_failed_trials", 3))
        self.last_heartbeat = 0.0
        self.env = self._mlflow_parent()

    def _mlflow_parent(self) -> dict[str, str]:
        """With the mlflow callback: the sweep's own MLflow run (made once, kept in the study), the trials' parent."""
        tracking = next((c for c in self.plan.pipeline.get("callbacks") or [] if c.get("type") == "mlflow"), None)
        if tracking is None:
            return {}
        from dsl.callbacks.mlflow_tracking import PARENT_ENV
        from dsl.sweep.tracking import parent_run

        run_id = self.study.user_attrs.get("mlflow_run_id")
        if run_id is None:
            try:
                run_id = parent_run(tracking, self.plan)
            except Exception as exc:  # it answered the start check, then failed: no trial runs untracked
                from dsl.callbacks.mlflow_tracking import failure, shown_uri
                from dsl.language.errors import DslError

                raise DslError(f"the sweep's MLflow run could not be made at {shown_uri(tracking.get('tracking_uri') or '')}: "
                               f"{failure(exc)}; no trial was started") from None
            self.study.set_user_attr("mlflow_run_id", run_id)
        return {PARENT_ENV: run_id}

    # ------------------------------------------------------------------ counts
    def _trials(self) -> list[Any]:
        return list(self.study.get_trials(deepcopy=False))

    def counted(self) -> int:
        """Trials that use up the budget: all but those that will be run again and those waiting to run
        (a re-run of an interrupted trial is asked before any new one, and counts once it runs)."""
        from optuna.trial import TrialState

        return sum(1 for t in self._trials() if not is_retried(t) and t.state != TrialState.WAITING)

    def failures(self) -> int:
        from optuna.trial import TrialState

        return sum(1 for t in self._trials() if t.state == TrialState.FAIL and not is_retried(t))

    # ------------------------------------------------------------------ resume
    def requeue_interrupted(self) -> None:
        """Ask again, with the same values and run directory, every trial a Ctrl-C or a dead driver ended."""
        import optuna

        optuna.storages.fail_stale_trials(self.study)
        trials = self._trials()
        retried = {t.user_attrs.get("retry_of") for t in trials}
        for trial in trials:
            if is_retried(trial) and trial.number not in retried and trial.params:
                run_dir = trial.user_attrs.get("run_dir") or str(self.plan.trial_dir(trial.number))
                self.study.enqueue_trial(trial.params, user_attrs={"run_dir": run_dir, "retry_of": trial.number,
                                                                   "trial_of": shown_number(trial)})
                say(f"trial {shown_number(trial)} was interrupted: it runs again (resuming {run_dir})")

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        """0 when the budget is spent, 1 when max_failed_trials stopped the sweep, 130 on Ctrl-C."""
        self.requeue_interrupted()
        total = budget(self.plan)
        done = self.counted()
        if done >= total:
            say(f"the study already has {done} of {total} trials; raise sweep.max_trials to run more")
            return 0
        wanted = int(self.plan.sweep.get("parallel_trials", 1))
        if self.plan.parallel < wanted:
            say(f"running {self.plan.parallel} trial(s) at a time, not parallel_trials {wanted}: this machine has "
                f"{available_slots(self.plan.sweep)} slots (set sweep.slots to say otherwise)")
        say(f"study {self.plan.study_name!r} in {_shown_url(self.plan.storage)}: {done} of {total} trials done, "
            f"{self.plan.parallel} at a time, {self.plan.ranks} rank(s) each")
        with _interrupts_as_keyboard():
            try:
                return self._loop(total)
            except KeyboardInterrupt:
                self._stop_all(INTERRUPTED, "stopped by Ctrl-C (or SIGTERM); re-run the sweep to resume it")
                say("interrupted: the trials were stopped; run the same command again to resume the study")
                return 130

    def _loop(self, total: int) -> int:
        while True:
            if self.failures() >= self.max_failed:
                self._stop_all("failure", "the sweep stopped: max_failed_trials reached")
                say(f"stopping: {self.failures()} trials failed (sweep.max_failed_trials {self.max_failed}); "
                    "see each trial's reason with --status and its trial.log")
                return 1
            while len(self.running) < self.plan.parallel and self.counted() < total:
                self._start_next()
            if not self.running:
                return 0 if self._finished_any() else 1
            for trial, process in list(self.running.values()):
                self._watch(trial, process)
            self._heartbeat()
            time.sleep(POLL_SECONDS)

    def _finished_any(self) -> bool:
        from optuna.trial import TrialState

        if any(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in self._trials()):
            return True
        say("no trial finished; see each trial's reason with --status and its trial.log")
        return False

    def _start_next(self) -> None:
        trial = self.study.ask()
        values = {space.path: space.suggest(trial) for space in self.plan.spaces}
        run_dir = Path(trial.user_attrs.get("run_dir") or self.plan.trial_dir(trial.number))
        trial.set_user_attr("run_dir", str(run_dir))
        try:
            pipeline_file, metrics_format = self._write_trial_pipeline(values, run_dir)
        except DslError as exc:
            self._fail(trial, f"its pipeline is invalid: {exc}")
            return
        hosts = self._take_hosts()
        command = launcher(self.plan, pipeline_file, hosts)
        process = TrialProcess.start(trial.number, run_dir, command, metrics_format, hosts, self.env)
        self.running[trial.number] = (trial, process)
        shown = ", ".join(f"{path}={_short(value)}" for path, value in values.items())
        say(f"trial {shown_number(trial)} started: {shown} ({run_dir})")

    def _write_trial_pipeline(self, values: dict[str, Any], run_dir: Path) -> tuple[Path, str]:
        """The trial's resolved pipeline (the sweep file, --set, the trial's values, its run directory)."""
        from dsl.engine.rundir import atomic_write_text
        from dsl.language.pipeline import dump_pipeline, load_pipeline

        sets = [*self.plan.overrides, *(override(path, value) for path, value in values.items()),
                override("runner.model_dir", str(run_dir))]
        resolved = load_pipeline(self.plan.file, sets)
        resolved.pop("sweep", None)
        path = run_dir / "trial.yaml"
        atomic_write_text(path, f"# trial of sweep {self.plan.study_name}: {json.dumps(values)}\n" + dump_pipeline(resolved))
        return path, str(resolved["runner"].get("metrics_format", "jsonl"))

    def _watch(self, trial: Any, process: TrialProcess) -> None:
        for step, value in process.new_steps(self.plan.phase, self.plan.output):
            trial.report(value, step)
            if self.plan.sweep.get("early_stopping") and trial.should_prune():
                process.stop()
                self._end(trial, process)
                self._tell(trial, state=_state("PRUNED"))
                say(f"trial {shown_number(trial)} pruned after val phase {step} ({self.plan.metric} {value:.4g})")
                if self.env:  # tracked: its MLflow run says it was pruned
                    from dsl.sweep.tracking import mark_pruned

                    tracking = next(c for c in self.plan.pipeline["callbacks"] if c.get("type") == "mlflow")
                    problem = mark_pruned(tracking, process.run_dir, step)
                    if problem:
                        say(f"warning: trial {shown_number(trial)}'s MLflow run is not marked pruned: {problem}")
                return
        code = process.poll()
        if code is None:
            if self.timeout is not None and process.seconds > float(self.timeout):
                process.stop()
                self._end(trial, process)
                self._fail(trial, f"hung: still running after {float(self.timeout):g} s (sweep.trial_timeout_seconds); stopped")
            return
        process.new_values(self.plan.phase, self.plan.output)
        process.close()
        self._end(trial, process)
        if code != 0:
            detail = process.last_lines()
            self._fail(trial, f"exited with status {code}" + (f": {detail}" if detail else "") +
                       f" (log: {process.run_dir / 'trial.log'})")
        elif not process.values:
            self._fail(trial, f"reported no {self.plan.metric}: its metrics file ({process.metrics_file}) has no "
                              f"{self.plan.phase} record with {self.plan.output!r}")
        else:
            value = process.values[-1]
            if value != value:  # NaN
                self._fail(trial, f"{self.plan.metric} is NaN")
                return
            self._tell(trial, value)
            say(f"trial {shown_number(trial)} finished: {self.plan.metric} {value:.4g} in {process.seconds:.1f} s")

    def _tell(self, trial: Any, value: float | None = None, state: Any = None) -> None:
        """study.tell; the grid sampler's "grid done" (Study.stop, meant for optimize()) is no error here:
        the budget already ends a grid sweep at its size, and the trial's state is stored before it."""
        try:
            self.study.tell(trial, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise

    def _end(self, trial: Any, process: TrialProcess) -> None:
        self.running.pop(trial.number, None)
        trial.set_user_attr("seconds", round(process.seconds, 2))
        if process.hosts:
            self.free_hosts += _slot_list(process.hosts)

    def _fail(self, trial: Any, reason: str, interrupted: bool = False) -> None:
        trial.set_user_attr("failure", reason)
        if interrupted:
            trial.set_user_attr(INTERRUPTED, True)
        self._tell(trial, state=_state("FAIL"))
        if not interrupted:
            say(f"trial {shown_number(trial)} failed: {reason}")

    def _stop_all(self, kind: str, reason: str) -> None:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            for trial, process in list(self.running.values()):
                process.stop()
                # The val phases it ended since the last look (its row showed a value a phase old).
                for step, value in process.new_steps(self.plan.phase, self.plan.output):
                    trial.report(value, step)
                self._end(trial, process)
                self._fail(trial, reason, interrupted=kind == INTERRUPTED)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _heartbeat(self) -> None:
        """Tell the storage the running trials are alive (a driver that dies leaves them stale: re-run)."""
        if time.monotonic() - self.last_heartbeat < HEARTBEAT_SECONDS / 2:
            return
        self.last_heartbeat = time.monotonic()
        storage = self.study._storage
        for trial, _ in self.running.values():
            if hasattr(storage, "record_heartbeat"):
                storage.record_heartbeat(trial._trial_id)

    def _take_hosts(self) -> list[str] | None:
        """`host:n` entries for one horovodrun trial out of the sweep's free slots (None: this machine)."""
        if not self.plan.sweep.get("hosts"):
            return None
        taken: dict[str, int] = {}
        for _ in range(self.plan.ranks):
            host = self.free_hosts.pop(0)
            taken[host] = taken.get(host, 0) + 1
        return [f"{host}:{count}" for host, count in taken.items()]


def _slot_list(hosts: list[str] | None) -> list[str]:
    slots: list[str] = []
    for entry in hosts or []:
        host, _, count = entry.rpartition(":")
        slots += [host] * int(count)
    return slots


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else json.dumps(value)


@contextmanager
def _interrupts_as_keyboard() -> Iterator[None]:
    """SIGTERM to the sweep stops it as Ctrl-C does (trials stopped and marked to run again)."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _send_trials_kept(sweep: Sweep, tracking_uri: str | None) -> None:
    """What trials that ended during a tracking outage kept in their mlflow.json, sent: no trial is
    started again to send it, and its MLflow run would show RUNNING for good."""
    from dsl.callbacks.mlflow_tracking import failure, send_kept

    for trial in sweep.study.get_trials(deepcopy=False):
        run_dir = trial.user_attrs.get("run_dir")
        if not run_dir:
            continue
        try:
            sent = send_kept(Path(run_dir), tracking_uri)
        except Exception as exc:  # still down: the record keeps them for the sweep's next run
            say(f"warning: trial {shown_number(trial)}: mlflow: what its mlflow.json kept is still not sent: {failure(exc)}")
            continue
        if sent:
            say(f"trial {shown_number(trial)}: {sent}")


def run_sweep(plan: SweepPlan) -> int:
    sweep = Sweep(plan)
    code = sweep.run()
    if sweep.env:
        from dsl.sweep.tracking import finish_parent

        tracking = next(c for c in plan.pipeline["callbacks"] if c.get("type") == "mlflow")
        try:
            finish_parent(tracking, sweep.study.user_attrs["mlflow_run_id"], sweep.study, plan, code)
        except Exception as exc:  # the tracking server's trouble must not hide the sweep's results
            from dsl.callbacks.mlflow_tracking import failure

            say(f"warning: the sweep's MLflow run is not ended (it shows RUNNING): {failure(exc)}")
        _send_trials_kept(sweep, tracking.get("tracking_uri"))
    from dsl.sweep.report import write_report

    write_report(plan, open_study(plan, create=False), out=sys.stderr)
    return code
