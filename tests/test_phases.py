"""The workflow unrolls into the phases mmcv would run, and resumes skip exactly what is done."""

from dsl.engine.phases import Phase, due_phases, plan_phases


def test_epoch_based_two_train_one_val():
    phases = plan_phases([["train", 2], ["val", 1]], 3, by_epoch=True)
    assert [(p.mode, p.start) for p in phases] == [
        ("train", 0), ("train", 1), ("val", 2), ("train", 2), ("val", 3),
    ]


def test_iter_based_phases_hold_step_counts():
    phases = plan_phases([["train", 40], ["val", 1]], 100, by_epoch=False)
    assert phases == [
        Phase("train", 0, 40), Phase("val", 40, 0),
        Phase("train", 40, 40), Phase("val", 80, 0),
        Phase("train", 80, 20), Phase("val", 100, 0),
    ]


def test_val_first_workflow_and_repeated_val():
    phases = plan_phases([["val", 2], ["train", 1]], 2, by_epoch=True)
    assert [(p.mode, p.start) for p in phases] == [
        ("val", 0), ("val", 0), ("train", 0), ("val", 1), ("val", 1), ("train", 1),
    ]


def test_val_only_workflow_terminates():
    assert plan_phases([["val", 1]], 5, by_epoch=True) == [Phase("val", 0, 0)]


def test_due_phases_skip_what_a_restart_finds_done_judging_each_phase_when_reached():
    plan = plan_phases([["val", 2], ["train", 1]], 3, by_epoch=True)
    # Restarted after epoch 1 and one of its two val phases: the second val at 1, then on.
    position = {"units": 1, "vals": 1, "mid_epoch": False}
    met = []
    for phase in due_phases(plan, lambda: (position["units"], position["vals"], position["mid_epoch"])):
        met.append((phase.mode, phase.start))
        if phase.mode == "train":  # the phase runs: the position moves on before the next is judged
            position.update(units=position["units"] + 1, vals=0)
    assert met == [("val", 1), ("train", 1), ("val", 2), ("val", 2), ("train", 2)]


def test_due_phases_skip_the_val_phases_of_an_epoch_resumed_inside():
    plan = plan_phases([["train", 1], ["val", 1]], 2, by_epoch=True)
    assert [(p.mode, p.start) for p in due_phases(plan, lambda: (1, 0, True))] == [("train", 1)]
