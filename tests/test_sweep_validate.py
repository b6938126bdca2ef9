"""`dslrun validate` on a pipeline's `sweep:` section: every problem located before any trial runs.

The sweep files extend the shipped quickstart pipeline, as a user's would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dsl.cli import main

QUICKSTART = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"

VALID = f"""\
extends: {QUICKSTART}
sweep:
  metric: val/accuracy
  max_trials: 12
  early_stopping: {{type: asha}}
  parameters:
    modeler.optimizer.learning_rate: {{type: log_uniform, low: 0.01, high: 0.5}}
    network.depth: {{type: choice, values: [20, 32]}}
    modeler.optimizer.momentum: {{type: uniform, low: 0.5, high: 0.95}}
    inputter.batch_size: {{type: int, low: 8, high: 32, step: 8}}
    runner.horovod.compression: {{type: choice, values: [none, fp16]}}
"""


def validate(tmp_path: Path, text: str, *args: str) -> tuple[int, list[str]]:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    data = tmp_path / "data"  # the quickstart's files, there (plain validate warns of missing ones)
    data.mkdir(exist_ok=True)
    for name in ("train.csv", "eval.csv"):
        (data / name).touch()
    result = CliRunner().invoke(main, ["validate", str(path), *args], catch_exceptions=False,
                                env={"DATA_DIR": str(data)})
    assert "Traceback" not in result.output
    return result.exit_code, [line.removeprefix(f"{path}:") for line in result.stdout.splitlines()]


def edit(old: str, new: str, text: str = VALID) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_a_valid_sweep_validates_and_shows_with_its_defaults(tmp_path: Path) -> None:
    assert validate(tmp_path, VALID) == (0, [])
    shown = CliRunner().invoke(main, ["show", str(tmp_path / "sweep.yaml")], catch_exceptions=False)
    assert shown.exit_code == 0
    tail = shown.stdout[shown.stdout.index("\nsweep:"):]
    assert "method: tpe" in tail and "parallel_trials: 1" in tail and "max_failed_trials: 3" in tail


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("network.depth: {type: choice, values: [20, 32]}", "network.dept: {type: choice, values: [20, 32]}",
         "8:5: error: sweep.parameters.network.dept: network.dept: no such key: network has no 'dept'; did you mean 'depth'?"),
        ("values: [20, 32]", "values: [20, 26]",
         "8:48: error: sweep.parameters.network.depth.values[1]: the space can give network.depth the value 26 (values[1]), "
         "which the pipeline refuses: expected one of 20, 32, 44, 56, 110, got 26 (integer); narrow the space to values "
         "the setting accepts"),
        ("low: 0.5, high: 0.95", "low: 0.5, high: 1.5",
         "9:65: error: sweep.parameters.modeler.optimizer.momentum.high: the space can give modeler.optimizer.momentum the "
         "value 1.5 (high), which the pipeline refuses: must be less than 1.0, got 1.5; narrow the space "
         "to values the setting accepts"),
        ("low: 8, high: 32", "low: 0, high: 32",
         "10:43: error: sweep.parameters.inputter.batch_size.low: the space can give inputter.batch_size the value 0 (low), "
         "which the pipeline refuses: must be at least 1, got 0; narrow the space to values the setting accepts"),
        ("low: 0.01, high: 0.5", "low: 0.5, high: 0.01",
         "7:74: error: sweep.parameters.modeler.optimizer.learning_rate.high: high 0.01 is below low 0.5"),
        ("low: 0.01, high: 0.5", "low: 0, high: 0.5",
         "7:63: error: sweep.parameters.modeler.optimizer.learning_rate.low: a log scale needs low > 0, got 0; use type: "
         "uniform, or a positive low"),
        ("metric: val/accuracy", "metric: val/acc",
         "3:11: error: sweep.metric: the val phase has no output 'acc'; did you mean 'val/accuracy'? available: "
         "val/accuracy, val/cross_entropy, val/l2_loss, val/loss, val/macro_f1"),
        ("  max_trials: 12\n", "  max_trials: 12\n  method: grid\n",
         "5:11: error: sweep.method: a grid sweep needs choice or int spaces, but modeler.optimizer.learning_rate, "
         "modeler.optimizer.momentum is continuous; give it a choice of values, or use method: tpe or random"),
        ("  max_trials: 12\n", "  max_trials: 12\n  parallel_trials: 3\n  ranks_per_trial: 2\n  slots: 4\n",
         "5:20: error: sweep.parallel_trials: 3 trials at once of 2 processes each need 6 slots, but sweep.slots gives 4; "
         "lower parallel_trials to 2 or give more slots"),
        ("  max_trials: 12\n", "  max_trials: 12\n  parallel_trials: 2\n  ranks_per_trial: 2\n  hosts: ['a:2', 'b:1']\n",
         "5:20: error: sweep.parallel_trials: 2 trials at once of 2 processes each need 4 slots, but sweep.hosts gives 3; "
         "lower parallel_trials to 1 or give more slots"),
        ("inputter.batch_size: {type: int, low: 8, high: 32, step: 8}",
         "runner.model_dir: {type: choice, values: [a, b]}",
         "10:5: error: sweep.parameters.runner.model_dir: a sweep cannot tune runner.model_dir: the sweep sets it for "
         "each trial (or it is no setting)"),
    ],
)
def test_each_sweep_mistake_is_one_located_error(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert validate(tmp_path, edit(old, new)) == (1, [expected])


def test_a_mistake_of_the_pipeline_itself_is_not_blamed_on_the_space(tmp_path: Path) -> None:
    """A second terminate_on_nan callback is refused whatever a trial sets: one error where it is, not a
    second at a space's bound telling the user to narrow a range that was never the problem."""
    text = VALID.replace("sweep:\n", "callbacks: !append\n  - {type: terminate_on_nan}\n  - {type: terminate_on_nan}\n"
                                      "sweep:\n", 1)
    code, lines = validate(tmp_path, text)
    assert code == 1 and len(lines) == 1, lines
    assert "terminate_on_nan callback may appear only once" in lines[0] and "narrow the space" not in lines[0], lines


def test_switching_a_component_type_is_checked_with_the_new_type_s_parameters(tmp_path: Path) -> None:
    """cifar10.yaml writes momentum: 0.9, which adam refuses; defaults of momentum SGD are no problem."""
    text = edit("runner.horovod.compression: {type: choice, values: [none, fp16]}",
                "modeler.optimizer.type: {type: choice, values: [momentum, adam]}")
    code, lines = validate(tmp_path, text)
    assert code == 1
    assert len(lines) == 1, lines
    # The refusal names where the inherited key comes from (cifar10.yaml, which the sweep file extends).
    assert lines[0].startswith(
        "11:63: error: sweep.parameters.modeler.optimizer.type.values[1]: the space can give modeler.optimizer.type the "
        "value 'adam' (values[1]), which the pipeline refuses: modeler.optimizer.momentum: unknown parameter 'momentum' of "
        "optimizer type 'adam' (inherited from "), lines
    assert "pipelines/cifar10.yaml:35" in lines[0], lines
    assert lines[0].endswith("; allowed: type, learning_rate, beta_1, beta_2, epsilon, clipnorm; narrow the space to "
                             "values the setting accepts"), lines
    text = """\
version: 1
inputter: {type: synthetic, num_examples: {train: 40, val: 16}, image_shape: [8, 8, 3], num_classes: 4, batch_size: 8}
network: {type: mlp, hidden_units: [8]}
modeler: {type: image_classification, optimizer: {type: adam, learning_rate: 0.01}}
runner: {max_epochs: 2, workflow: [[train, 1], [val, 1]]}
sweep:
  parameters:
    modeler.optimizer.type: {type: choice, values: [adam, sgd]}
"""
    code, lines = validate(tmp_path, text)
    assert (code, lines) == (0, []), lines


def test_a_local_backend_runs_one_rank_per_trial(tmp_path: Path) -> None:
    text = edit("  max_trials: 12\n", "  max_trials: 12\n  ranks_per_trial: 2\n") + "runner: {backend: local}\n"
    code, lines = validate(tmp_path, text)
    assert code == 1
    assert lines == ["5:20: error: sweep.ranks_per_trial: runner.backend is local, which runs one process, but "
                     "ranks_per_trial is 2; set runner.backend: auto (horovodrun), horovod, collective or ps, or ranks_per_trial: 1"]


@pytest.mark.parametrize("backend", ["local", "collective"])
def test_hosts_are_refused_where_horovodrun_does_not_start_the_trials(tmp_path: Path, backend: str) -> None:
    text = edit("  max_trials: 12\n", "  max_trials: 12\n  hosts: ['a:1', 'b:1']\n") + f"runner: {{backend: {backend}}}\n"
    code, lines = validate(tmp_path, text)
    assert (code, lines) == (1, [f"5:10: error: sweep.hosts: sweep.hosts places trials with a launcher that reaches "
                                 f"other hosts, and runner.backend {backend} has none; remove hosts, or set "
                                 "runner.backend: auto or horovod"])


def test_sweep_of_a_pipeline_without_a_sweep_section_is_one_error_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sweep", str(QUICKSTART)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"dslrun: error: {QUICKSTART} has no sweep: section; add one (parameters, metric, ...), or a sweep file that "
        "extends this pipeline (see docs/sweeps.md)"
    ]


def test_a_sweep_tracked_by_a_server_that_does_not_answer_stops_at_once(tmp_path: Path) -> None:
    """The sweep asked nothing before making its own MLflow run, whose client retried for minutes:
    a trial of `dslrun sweep` met no output for over 3 minutes. Now it asks as `dslrun run` does:
    one located error, exit 1, no study made."""
    import socket

    pytest.importorskip("mlflow")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "sweep.yaml"
    text = edit("sweep:\n", f"sweep:\n  directory: {tmp_path / 'sweep'}\n") + (
        f"callbacks: !replace\n  - type: mlflow\n    tracking_uri: http://127.0.0.1:{port}\n")
    path.write_text(text, encoding="utf-8")
    line = text.splitlines().index(f"    tracking_uri: http://127.0.0.1:{port}") + 1
    result = CliRunner().invoke(main, ["sweep", str(path)], catch_exceptions=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"{path}:{line}:19: error: callbacks[0].tracking_uri: the MLflow tracking server http://127.0.0.1:{port} does "
        "not answer: Connection refused; start it or correct the URI (dslrun asks before training, so that a run "
        "never waits on it)"]
    assert not (tmp_path / "sweep").exists()


def test_the_sweep_s_own_mlflow_requests_give_up_within_seconds(tmp_path: Path) -> None:
    """A server that went away during a sweep: ending the sweep's MLflow run waited 4 minutes on
    MLflow's retries, then a traceback hid the sweep's table. The sweep's client now waits as a
    trial's does (5 s, no retry), and the driver turns the failure into a warning line."""
    import socket
    import time

    pytest.importorskip("mlflow")
    from dsl.callbacks.mlflow_tracking import failure
    from dsl.sweep.tracking import client_of

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        client_of({"tracking_uri": f"http://127.0.0.1:{port}"}).set_terminated("0" * 32, status="FINISHED")
    assert time.monotonic() - started < 30
    assert "Connection refused" in failure(raised.value) and len(failure(raised.value)) <= 300, failure(raised.value)


def test_the_importance_plot_of_too_few_trials_comes_with_a_caution(tmp_path: Path) -> None:
    """Parameter importances from 2 finished trials are noise: the report says so beside the plot."""
    optuna = pytest.importorskip("optuna")
    from dsl.sweep.report import IMPORTANCE_TRIALS, importance_caution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    plot = tmp_path / "param_importances.png"
    assert importance_caution([plot], study) == (
        f"caution: param_importances.png is drawn from 2 finished trials; importances mean little under {IMPORTANCE_TRIALS}")
    assert importance_caution([tmp_path / "optimization_history.png"], study) is None  # no importance plot drawn
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=IMPORTANCE_TRIALS)
    assert importance_caution([plot], study) is None


def test_the_best_trial_comes_with_a_caution_that_one_seed_was_used(tmp_path: Path) -> None:
    """Trial A15: 10-epoch trials spread 0.12-0.29 in mAP, two seeds of one setting 0.24 and 0.42; nothing
    in the sweep's output said that the ranking may be noise. Not said when the seed is swept."""
    from types import SimpleNamespace

    from dsl.sweep.report import seed_caution

    best = tmp_path / "best.yaml"
    plan: Any = SimpleNamespace(pipeline={"seed": 5}, spaces=[SimpleNamespace(path="modeler.box_loss")])
    assert seed_caution(plan, best) == (
        "caution: every trial trained with seed 5; a gap between trials smaller than what another seed gives is "
        f"noise: before trusting it, run dslrun run {best} --set seed=6 (and the runner-up the same way) and compare")
    plan.spaces.append(SimpleNamespace(path="seed"))
    assert seed_caution(plan, best) is None


def test_the_median_rule_waits_a_third_of_a_trials_val_phases_unless_told() -> None:
    """In a trial's first epochs every trial is near chance: pruning there (a warm-up of 1 val phase)
    stopped 3 of 5 trials of a short sweep at random (issue 41)."""
    from types import SimpleNamespace

    from dsl.sweep.driver import val_phases, warmup_phases

    runner = {"workflow": [["train", 1], ["val", 1]], "max_epochs": 12}
    assert val_phases(runner) == 12
    assert val_phases({"workflow": [["train", 4], ["val", 1]], "max_iters": 40, "max_epochs": None}) == 10
    plan = SimpleNamespace(sweep={"early_stopping": {"type": "median"}}, pipeline={"runner": runner})
    assert warmup_phases(plan) == 4
    plan.sweep["early_stopping"]["warmup_phases"] = 1
    assert warmup_phases(plan) == 1
    short = SimpleNamespace(sweep={"early_stopping": {"type": "median"}},
                            pipeline={"runner": {"workflow": [["train", 1], ["val", 1]], "max_epochs": 2}})
    assert warmup_phases(short) == 1


def test_a_pruned_trial_s_mlflow_run_says_it_was_pruned(tmp_path: Path) -> None:
    """A pruned trial ended its MLflow run FINISHED, like a finished one (the trial takes the
    sweep's SIGTERM for a preemption): the sweep marks it, in a real MLflow store."""
    pytest.importorskip("mlflow")
    import json

    from mlflow.tracking import MlflowClient

    from dsl.sweep.tracking import mark_pruned

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("trials", artifact_location=str(tmp_path / "artifacts")))
    client.set_terminated(run.info.run_id, "FINISHED")  # as the trial's callback ends it
    trial = tmp_path / "trial-1"
    trial.mkdir()
    (trial / "mlflow.json").write_text(json.dumps({"tracking_uri": uri, "run_id": run.info.run_id}))
    assert mark_pruned({"tracking_uri": uri}, trial, 2) is None
    marked = client.get_run(run.info.run_id)
    assert marked.info.status == "KILLED" and marked.data.tags["dslrun.pruned"] == "after val phase 2"
    assert mark_pruned({"tracking_uri": uri}, tmp_path / "never-started", 1) == \
        f"{tmp_path / 'never-started' / 'mlflow.json'} names no MLflow run"


def test_a_failed_trial_s_reason_is_dslrun_s_own_last_word(tmp_path: Path) -> None:
    """MLflow's "View run" links follow dslrun's failure line in a trial's log; the sweep table's
    reason was theirs. A rank's prefix is left out too."""
    from dsl.sweep.trial import TrialProcess

    (tmp_path / "trial.log").write_text(
        "$ horovodrun -np 2 dslrun run trial.yaml\n"
        "[1,0]<stdout>:run failed at step 21; no checkpoint of this state was saved\n"
        "[1,0]<stderr>:dslrun: failed: the train loss diverged: 105.6 at step 21 is 18x its first value 5.784\n"
        "[1,0]<stdout>:\U0001F3C3 View run trial-0005 at: http://127.0.0.1:5055/#/experiments/1/runs/a7\n"
        "[1,0]<stdout>:\U0001F9EA View experiment at: http://127.0.0.1:5055/#/experiments/1\n", encoding="utf-8")
    trial = TrialProcess.__new__(TrialProcess)
    trial.run_dir = tmp_path
    assert trial.last_lines() == "dslrun: failed: the train loss diverged: 105.6 at step 21 is 18x its first value 5.784"


def test_val_records_found_together_are_reported_as_successive_steps(tmp_path: Path) -> None:
    """A resumed trial's metrics file is read from its start: its val records came in one read and
    were all reported at one step (Optuna warned 'step=14 is already reported' and kept one)."""
    import json

    from dsl.sweep.trial import TrialProcess

    metrics = tmp_path / "metrics.jsonl"
    records = [{"mode": mode, "accuracy": value} for mode, value in
               (("train", 0.1), ("val", 0.2), ("train", 0.3), ("val", 0.4), ("val", 0.5))]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records[:4]))
    trial = TrialProcess.__new__(TrialProcess)
    trial.metrics_file, trial.records_read, trial.values = metrics, 0, []
    assert trial.new_steps("val", "accuracy") == [(1, 0.2), (2, 0.4)]
    with metrics.open("a") as handle:
        handle.write(json.dumps(records[4]) + "\n")
    assert trial.new_steps("val", "accuracy") == [(3, 0.5)] and trial.new_steps("val", "accuracy") == []


def test_a_resumed_trial_s_seconds_include_its_interrupted_attempt() -> None:
    """The table's seconds of a trial interrupted and resumed counted the resumed part only."""
    import types

    import optuna

    from dsl.sweep.report import status_rows

    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                              user_attrs={"seconds": 40.0, "interrupted": True}))
    study.add_trial(optuna.trial.create_trial(value=0.9, user_attrs={"seconds": 15.2, "retry_of": 0}))
    study.add_trial(optuna.trial.create_trial(value=0.8, user_attrs={"seconds": 30.0}))
    plan = types.SimpleNamespace(metric="val/accuracy", spaces=[])
    rows = status_rows(plan, study)  # type: ignore[arg-type]
    assert [row[1:4] for row in rows[1:]] == [["complete", "0.9", "55.2"], ["complete", "0.8", "30.0"]], rows


def test_a_resumed_study_does_not_replay_the_first_run_s_suggestions(tmp_path: Path) -> None:
    """A new user's resumed sweep re-ran trials 0 and 1's exact values as trials 4 and 5: the sampler
    was seeded anew with sweep.seed. A study opened again with trials in it draws on."""
    from dsl.language.pipeline import load_pipeline
    from dsl.sweep.driver import open_study
    from dsl.sweep.plan import SweepPlan

    file = tmp_path / "sweep.yaml"
    file.write_text(edit("  early_stopping: {type: asha}\n",
                         f"  method: random\n  seed: 3\n  directory: {tmp_path / 'sweep'}\n"))
    plan = SweepPlan.read(str(file), (), load_pipeline(str(file)))

    def ask(study):  # type: ignore[no-untyped-def]
        trial = study.ask()
        value = trial.suggest_float("modeler.optimizer.learning_rate", 0.01, 0.5, log=True)
        study.tell(trial, 0.5)
        return value

    first = open_study(plan)
    firsts = [ask(first), ask(first)]
    again = open_study(plan)  # the same command run again
    resumed = [ask(again), ask(again)]
    assert not set(resumed) & set(firsts), (firsts, resumed)
    fresh = SweepPlan.read(str(file), (), load_pipeline(str(file)))
    fresh.storage = f"sqlite:///{tmp_path / 'other.db'}"
    assert ask(open_study(fresh)) == firsts[0]  # a new study still starts from sweep.seed


@pytest.mark.parametrize(("method", "trials", "warned"), [("", 3, True), ("  method: tpe\n", 10, True),
                                                          ("  method: tpe\n", 11, False), ("  method: random\n", 3, False)])
def test_a_tpe_sweep_of_ten_trials_or_fewer_is_said_to_be_a_random_search(tmp_path: Path, method: str, trials: int,
                                                                            warned: bool) -> None:
    """Trial A10 ran 3 tpe trials, which Optuna's TPE draws at random before it models anything."""
    code, lines = validate(tmp_path, edit("  max_trials: 12\n", f"{method}  max_trials: {trials}\n"))
    assert code == 0
    if not warned:
        assert lines == []
        return
    at = "4:11: warning: sweep.method:" if method else "4:15: warning: sweep.max_trials:"
    assert lines == [f"{at} tpe draws its first 10 trials at random before it models the results (Optuna's "
                     f"n_startup_trials), so these {trials} are a random search; give max_trials above 10 for tpe to "
                     "search, or write method: random to say so"]
