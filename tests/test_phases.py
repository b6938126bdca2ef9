"""The workflow unrolls into the phases mmcv would run, and resumes skip exactly what is done."""

from dsl.engine.phases import Phase, plan_phases


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
