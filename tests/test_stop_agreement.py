"""Where the ranks agree on stopping (dsl/engine/stop_agreement.py): a rule every rank computes alike."""

from __future__ import annotations

from dsl.engine.stop_agreement import EVERY_STEPS, REASONS, code, due


def agreement_steps(calls: list[int], start: int = 0, world_size: int = 2) -> list[int]:
    """The global steps after which the ranks agree, for a phase of calls of these sizes from `start`."""
    steps, step, total = [], start, sum(calls)
    for i, count in enumerate(calls):
        before, step = step, step + count
        if due(before, step, i == len(calls) - 1 or step - start == total, world_size):
            steps.append(step)
    return steps


def test_ranks_agree_at_each_multiple_of_every_steps_and_at_the_phase_end() -> None:
    assert EVERY_STEPS == 16
    assert agreement_steps([1] * 40) == [16, 32, 40]
    # A call that crosses a multiple agrees after it: the stop comes at most one call late.
    assert agreement_steps([5] * 8) == [20, 35, 40]
    assert agreement_steps([16] * 3) == [16, 32, 48]  # steps_per_call >= 16: after every call, as before
    # From a resumed or elastic-reset position the points stay the multiples of the global step.
    assert agreement_steps([1] * 10, start=27) == [32, 37]


def test_one_process_agrees_after_every_call() -> None:
    assert agreement_steps([1] * 5, world_size=1) == [1, 2, 3, 4, 5]


def test_the_strongest_reason_wins() -> None:
    assert [code(False, False, False), code(False, False, True), code(False, True, True), code(True, True, True)] \
        == [0, 1, 2, 3]
    assert REASONS[max(code(False, False, True), code(True, False, True))] == "another rank was interrupted"
