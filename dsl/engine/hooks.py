"""The base class of every callback: the YAML's `callbacks:` entries, ordered by a named priority.

As MMEngine's hooks: a callback overrides the methods of the hook points it cares about;
the loop calls every callback at each point, lowest priority value first, list order
breaking ties. The `*_train_*` / `*_val_*` methods default to the mode-independent
`before_epoch` etc., so a callback that does the same thing in both modes overrides one.

This module never imports TensorFlow: the callback modules that subclass `Callback` are
imported by `dslrun validate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsl.language.context import BuildContext
from dsl.language.priorities import PRIORITIES

if TYPE_CHECKING:
    from dsl.engine.contracts import RunnerView

def priority_value(priority: str | int) -> int:
    """A priority name or number as the number the loop sorts by."""
    return PRIORITIES[priority] if isinstance(priority, str) else int(priority)


class Callback:
    """Base class of every callback. `runner` is the `dsl.engine.runner.Runner`.

    Class attributes:
        priority: default priority name; the YAML `priority:` key overrides it.
        chief_only: run only on the chief (rank 0) — for callbacks that write files or print.
    """

    priority: str | int = "NORMAL"
    chief_only: bool = False

    def __init__(self, params: dict[str, Any] | None = None, context: BuildContext | None = None) -> None:
        self.params = dict(params or {})
        self.context = context
        if self.params.get("priority") is not None:
            self.priority = self.params["priority"]

    @property
    def name(self) -> str:
        return str(self.params.get("type", type(self).__name__))

    # Mode-independent template methods.
    def before_run(self, runner: RunnerView) -> None: ...
    def after_run(self, runner: RunnerView) -> None: ...
    def before_epoch(self, runner: RunnerView) -> None: ...
    def after_epoch(self, runner: RunnerView) -> None: ...
    def before_iter(self, runner: RunnerView) -> None: ...
    def after_iter(self, runner: RunnerView) -> None: ...

    # Mode-specific points; by default they fall through to the methods above.
    def before_train_epoch(self, runner: RunnerView) -> None:
        self.before_epoch(runner)

    def after_train_epoch(self, runner: RunnerView) -> None:
        self.after_epoch(runner)

    def before_val_epoch(self, runner: RunnerView) -> None:
        self.before_epoch(runner)

    def after_val_epoch(self, runner: RunnerView) -> None:
        self.after_epoch(runner)

    def before_train_iter(self, runner: RunnerView) -> None:
        self.before_iter(runner)

    def after_train_iter(self, runner: RunnerView) -> None:
        self.after_iter(runner)

    def before_val_iter(self, runner: RunnerView) -> None:
        self.before_iter(runner)

    def after_val_iter(self, runner: RunnerView) -> None:
        self.after_iter(runner)

    def reads_replica_state(self, step_before: int, step_after: int) -> bool:
        """Whether `after_train_iter` of the call that took the run from `step_before` to
        `step_after` reads the model's batch-norm statistics (saves a checkpoint, say).

        Asked on every rank, chief-only callbacks included, before the call's hooks: with
        several replicas a True averages the statistics there first (dsl/engine/replicas.py),
        a collective that every rank must join, so the answer must depend on the two steps
        and the callback's parameters only, never on a clock or on this rank's values. Reads
        at phase ends and every 16 steps are averaged anyway.
        """
        return False

    # State that must survive a restart (MMEngine's checkpoint hook points).
    def before_save_checkpoint(self, runner: RunnerView, state: dict[str, Any]) -> None:
        """Put into `state` (JSON values) what this callback must remember across a restart.

        A best score or a patience counter reset by a resume would change the run's
        decisions; saved with every checkpoint and given back to `after_load_checkpoint`,
        a resumed run decides as an uninterrupted one. Keep such state from `__init__` on:
        `before_run` comes after the load.
        """

    def after_load_checkpoint(self, runner: RunnerView, state: dict[str, Any]) -> None:
        """Take back what `before_save_checkpoint` put into `state`; called when a run resumes
        from a checkpoint that holds it, before `before_run`."""


def sort_callbacks(callbacks: list[Callback]) -> list[Callback]:
    """Callbacks in calling order: by priority value, then by their order in the list."""
    return [c for _, _, c in sorted((priority_value(c.priority), i, c) for i, c in enumerate(callbacks))]
