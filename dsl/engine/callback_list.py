"""Calling the pipeline's callbacks at a hook point, and carrying their state across a restart.

Keras's `CallbackList` and MMEngine's `call_hook`: one place knows the order (priority,
then list order), which callbacks run off the chief (`chief_only`), which have started
(a rank promoted to chief by Horovod elastic starts the chief-only ones it skipped), and
under which stable key each callback's state is saved beside a checkpoint.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dsl.engine.contracts import RunnerView
from dsl.engine.hooks import Callback, sort_callbacks
from dsl.language import registry
from dsl.language.errors import RegistryError

#: Every hook point the loop calls, in the order of a run (a test checks each is called).
POINTS = (
    "before_run",
    "before_train_epoch", "before_train_iter", "after_train_iter", "after_train_epoch",
    "before_val_epoch", "before_val_iter", "after_val_iter", "after_val_epoch",
    "after_run",
)


class CallbackList:
    """The run's callbacks in calling order."""

    def __init__(self, callbacks: list[Callback]) -> None:
        self.items = sort_callbacks(callbacks)
        self._started: set[int] = set()  # ids of the callbacks whose before_run has run
        self._run_started = False  # the before_run point has come

    def add(self, callback: Callback) -> None:
        """Add one (a backend's own), keeping the calling order by priority."""
        self.items = sort_callbacks([*self.items, callback])

    def call(self, point: str, runner: RunnerView) -> None:
        """Call `point` of every callback that runs on this rank."""
        for callback in self.items:
            if callback.chief_only and not runner.placement.is_chief:
                continue
            getattr(callback, point)(runner)
            if point == "before_run":
                self._started.add(id(callback))
        if point == "before_run":
            self._run_started = True

    def read_replica_state(self, step_before: int, step_after: int) -> bool:
        """Whether any callback, chief-only or not, reads the batch-norm statistics after this call
        (`Callback.reads_replica_state`): the same answer on every rank."""
        return any(callback.reads_replica_state(step_before, step_after) for callback in self.items)

    def start_skipped(self, runner: RunnerView) -> None:
        """A rank that became the chief runs `before_run` of the chief-only callbacks it
        skipped at the start, once each."""
        if not self._run_started:
            return  # before_run itself has not come yet: it will start every callback
        for callback in self.items:
            if callback.chief_only and id(callback) not in self._started:
                callback.before_run(runner)
                self._started.add(id(callback))

    def keyed(self) -> list[tuple[str, Callback]]:
        """Each callback under a name that a later run of the pipeline gives it too: its type,
        numbered when repeated."""
        seen: Counter[str] = Counter()
        keyed = []
        for callback in self.items:
            keyed.append((f"{callback.name}.{seen[callback.name]}" if seen[callback.name] else callback.name, callback))
            seen[callback.name] += 1
        return keyed

    def states(self, runner: RunnerView) -> dict[str, dict[str, Any]]:
        """What each callback must remember across a restart, by key (empty ones left out)."""
        states = {}
        for key, callback in self.keyed():
            state: dict[str, Any] = {}
            callback.before_save_checkpoint(runner, state)
            if state:
                states[key] = state
        return states

    def load_states(self, states: dict[str, Any], runner: RunnerView) -> None:
        """Give each callback back what `states` saved for it, also when it was saved under the
        callback's former name (a run of `eval_basic` resumed as `val_basic`)."""
        for key, callback in self.keyed():
            saved = next((states[k] for k in _keys_with_former_names(key, callback.name) if k in states), None)
            if saved is not None and (runner.placement.is_chief or not callback.chief_only):
                callback.after_load_checkpoint(runner, saved)


def _keys_with_former_names(key: str, name: str) -> list[str]:
    """`key` (`type` or `type.N`), then the same key under each former name of that type."""
    try:
        aliases = registry.lookup("callback", name).aliases
    except RegistryError:  # a callback of dslrun's own, not from the registry
        aliases = ()
    return [key, *(alias + key[len(name):] for alias in aliases)]
