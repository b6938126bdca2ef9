"""When the ranks agree on stopping: at steps every rank reaches, not after every call (issue 29).

Agreeing is an eager allreduce of one integer (the backend's `max_across_ranks`); under
Horovod it waits for a Horovod cycle, several times what a hand-written loop spends outside
its call per step (docs/benchmarks.md). The rule, the same
on every rank because it depends only on the global step and the phase's length: the ranks
agree after a train call that reaches or crosses a multiple of EVERY_STEPS, after the
last call of every train phase, before every phase that has work and once after the last
phase. A stop asked on one rank between two such points (a callback's request_stop, fail
on NaN or divergence, SIGTERM/SIGINT) waits for the next one, where every rank learns the
strongest reason and all stop after that same call. So a stop takes effect at most
EVERY_STEPS - 1 steps (or the rest of one call) after it was asked, never past the end of
its phase; one process agrees with itself after every call. The agreements between phases
matter for a signal that lands after a phase's last agreement (during the chief's
checkpoint save, say): without them that rank would leave the workflow while the others
waited for it in the next phase's first collective.
An elastic reset resumes at a commit's step, which every rank shares, so the points stay
common.
"""

from __future__ import annotations

from dataclasses import dataclass

EVERY_STEPS = 16
REASONS = ("", "another rank stopped the run", "another rank failed", "another rank was interrupted")
INTERRUPTED = 3  # the code of a signal (SIGTERM/SIGINT): the run saves and exits 128 + signal


def due(step_before: int, step_after: int, phase_ended: bool, world_size: int, every: int = EVERY_STEPS) -> bool:
    """Whether the ranks agree after the call that took the run from `step_before` to `step_after`."""
    return world_size <= 1 or phase_ended or step_after // every > step_before // every


def code(interrupted: bool, failed: bool, stopping: bool) -> int:
    """This rank's reason to stop, as the integer the ranks take the maximum of (an index of REASONS)."""
    return INTERRUPTED if interrupted else 2 if failed else 1 if stopping else 0


@dataclass
class StopState:
    """Whether and why a run stops: the runner's one record of it.

    asked: a stop was asked on this rank (`request_stop`, `fail`, a signal, or another rank's
        reason learnt at an agreement); `reason` is the first reason asked.
    failed: the stop is a failure (exit 1). signal: the SIGTERM/SIGINT received (0: none).
    agreed: the code the ranks last agreed on (`code`, REASONS): what every rank acts on, since
        `asked` can change on one rank alone at any time.
    finished: why a re-run had nothing to do (None: it had work).
    """

    asked: bool = False
    reason: str = ""
    failed: bool = False
    signal: int = 0
    agreed: int = 0
    finished: str | None = None

    def ask(self, reason: str, failed: bool = False) -> None:
        """Stop after the current call (several ranks: the next agreed one); the first reason stays."""
        self.asked, self.reason, self.failed = True, self.reason or reason, self.failed or failed

    def mine(self) -> int:
        """This rank's reason to stop, as the code the ranks take the maximum of."""
        return code(bool(self.signal), self.failed, self.asked)

    def learn(self, agreed: int, interrupted_by: int) -> None:
        """Take what the ranks agreed: a stronger reason of another rank becomes this rank's."""
        if agreed > self.mine():
            self.signal = interrupted_by if agreed == INTERRUPTED else 0
            self.failed = agreed == 2
            self.ask(REASONS[agreed])
        self.agreed = agreed

    @property
    def stopping(self) -> bool:
        """Whether the ranks agreed to stop."""
        return self.agreed > 0
