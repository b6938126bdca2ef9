"""What `init_checkpoint` restores, decided by name before any variable is assigned.

Keras' `load_weights(by_name=True)` with `assert_existing_objects_matched`: each model
variable takes the file's value of the same name. The plan sorts the model's variables
into restored, skipped (by `skip`), head reset (the classes changed, or `reset_head`),
missing from the file, and the file's variables the model has not (unexpected). A file
of another network shows up as missing and unexpected names, which are errors unless the
YAML accepts them (`allow_missing`, `allow_unexpected`); every message prints the file's
names beside the model's. Imports TensorFlow: import this module inside functions only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.callbacks._pretrained import variable_name
from dsl.language.errors import DslError
from dsl.networks import GROUPS, head_layer_names, head_variable_names

_SHOWN = 6  # names listed in full before "... (N in all)"


class Selector:
    """One entry of `skip` / `trainable`: a group name (`head`, `backbone`) or a regular
    expression, with the `search` / `pattern` interface of a compiled pattern."""

    def __init__(self, entry: str, head: set[str]) -> None:
        self.pattern = entry
        self._head = head
        self._regex = None if entry in GROUPS else re.compile(entry)

    def search(self, name: str) -> bool:
        if self._regex is not None:
            return self._regex.search(name) is not None
        return (name in self._head) == (self.pattern == "head")


def selectors(model: tf.keras.Model, entries: list[str], key: str) -> list[Selector]:
    """The `skip` / `trainable` entries of `key` for `model` (its head decides the groups)."""
    head = head_variable_names(model)
    if any(entry in GROUPS for entry in entries) and not head:
        raise DslError(f"{key}: the network declares no head layer, so `head` and `backbone` select nothing; "
                       f"give regular expressions of variable names instead")
    return [Selector(entry, head) for entry in entries]


def listing(names: list[str]) -> str:
    """`a, b, c` or `a, b, ... (40 in all)`: names a message can print whole."""
    shown = ", ".join(names[:_SHOWN])
    return shown if len(names) <= _SHOWN else f"{shown}, ... ({len(names)} in all)"


@dataclass
class RestorePlan:
    """The outcome of matching a model with a file, by name."""

    path: str
    assignments: list[tuple[tf.Variable, np.ndarray]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    head_reset: list[str] = field(default_factory=list)
    head_reason: str = ""
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    def report(self) -> list[str]:
        """The lines saying what was restored and what was not (printed by the chief)."""
        line = f"init_checkpoint: restored {len(self.assignments)} variables by name from {self.path}"
        if self.head_reset:
            line += f"; head reset ({self.head_reason}): {listing(self.head_reset)}"
        if self.skipped:
            line += f"; skipped {len(self.skipped)} by init_checkpoint.skip: {listing(self.skipped)}"
        return [line]

    def warnings(self) -> list[str]:
        """What the YAML accepted with allow_missing / allow_unexpected, said each run."""
        lines = []
        if self.missing:
            lines.append(f"init_checkpoint: {len(self.missing)} variables of the model are not in {self.path} and "
                         f"keep their initial values (allow_missing): {listing(self.missing)}")
        if self.unexpected:
            lines.append(f"init_checkpoint: {len(self.unexpected)} variables of {self.path} are not in the model "
                         f"and were ignored (allow_unexpected): {listing(self.unexpected)}")
        return lines


def plan_restore(model: tf.keras.Model, stored: dict[str, np.ndarray], path: str, params: dict[str, Any],
                 skip_entries: list[str]) -> RestorePlan:
    """Match `model` with the file's variables `stored` under `params` (init_checkpoint's); an
    error, naming both sides, for anything the YAML did not accept."""
    variables = {variable_name(v): v for v in model.weights}
    names = list(variables)
    _check_unique(names, [variable_name(v) for v in model.weights])
    both = f"the model's variables: {listing(names)}; the file's: {listing(list(stored))}"
    if not any(name in stored for name in names):
        raise DslError(f"init_checkpoint.path: {path!r} holds no variable of this model by name, so it was saved "
                       f"from another network; {both}")
    skip = selectors(model, skip_entries, "init_checkpoint.skip")
    unused = [s.pattern for s in skip if not any(s.search(n) for n in [*names, *stored])]
    if unused:
        raise DslError(f"init_checkpoint.skip: {unused} match no variable of the model nor of the file, so they "
                       f"skip nothing (a misspelt head name would fine-tune the old head); {both}")
    plan = RestorePlan(path)
    plan.skipped = [n for n in names if any(s.search(n) for s in skip)]
    _plan_head(plan, model, variables, stored, params)
    load = [n for n in names if n not in plan.skipped and n not in plan.head_reset]
    _check_shapes(load, variables, stored, path)
    plan.missing = [n for n in load if n not in stored]
    # A skip entry may name the file's own variables too: those are not unexpected.
    plan.unexpected = [n for n in stored if n not in variables and not any(s.search(n) for s in skip)]
    _check_restores_something(plan, load, stored, both)
    _check_accepted(plan, params, both)
    _check_trainable_head(plan, model, params)
    plan.assignments = [(variables[n], stored[n]) for n in load if n in stored]
    return plan


def _check_unique(names: list[str], all_names: list[str]) -> None:
    if len(names) != len(all_names):
        twice = sorted({n for n in all_names if all_names.count(n) > 1})
        raise DslError(f"init_checkpoint: the model has several variables named {listing(twice)}, so they cannot "
                       f"be restored by name; give its layers distinct names")


def _plan_head(plan: RestorePlan, model: tf.keras.Model, variables: dict[str, tf.Variable],
               stored: dict[str, np.ndarray], params: dict[str, Any]) -> None:
    """Reset the head when asked (reset_head: true), or by default when the file's differs."""
    head = [n for n in variables if n in head_variable_names(model) and n not in plan.skipped]
    reset = params.get("reset_head")
    layers = ", ".join(head_layer_names(model))
    if reset is None:
        absent = [n for n in head if n not in stored]
        differ = [n for n in head if n in stored and stored[n].shape != tuple(variables[n].shape)]
        if differ:
            n = differ[0]
            plan.head_reason = (f"{layers} is {tuple(variables[n].shape)} in the model, {stored[n].shape} in the "
                                f"file: another number of classes")
        elif absent:
            plan.head_reason = f"{layers} is not in the file"
        reset = bool(differ or absent)
    elif reset:
        plan.head_reason = "init_checkpoint.reset_head"
    plan.head_reset = head if reset else []


def _check_shapes(load: list[str], variables: dict[str, tf.Variable], stored: dict[str, np.ndarray],
                  path: str) -> None:
    wrong = [n for n in load if n in stored and stored[n].shape != tuple(variables[n].shape)]
    if wrong:
        details = "; ".join(f"{n} is {stored[n].shape} in the file, {tuple(variables[n].shape)} in the model"
                            for n in wrong[:_SHOWN])
        more = f" ({len(wrong)} variables in all)" if len(wrong) > _SHOWN else ""
        raise DslError(
            f"init_checkpoint: shapes differ from {path!r}: {details}{more}; add a pattern matching these "
            f"variables to init_checkpoint.skip to keep their fresh values, e.g. skip: ['^{wrong[0].split('/')[0]}/']"
        )


def _check_restores_something(plan: RestorePlan, load: list[str], stored: dict[str, np.ndarray], both: str) -> None:
    """A file that gives the model no value at all: allow_missing would have let it through, every
    variable fresh and `restored 0 variables` the only word (trial B11: an MLP's checkpoint for a
    ResNet, whose heads alone shared a name)."""
    if load and len(plan.missing) == len(load):
        shared = [n for n in plan.head_reset + plan.skipped if n in stored]
        beside = f" (only {listing(shared)}, which are reset or skipped, share a name)" if shared else ""
        raise DslError(
            f"init_checkpoint: {plan.path!r} would restore nothing: none of the model's {len(load)} variables to "
            f"restore is in it{beside}, so it was saved from another network, and allow_missing would only leave "
            f"every one at its initial value; give a checkpoint of this network; {both}"
        )


def _check_accepted(plan: RestorePlan, params: dict[str, Any], both: str) -> None:
    if plan.missing and not params.get("allow_missing"):
        raise DslError(
            f"init_checkpoint: {len(plan.missing)} variables of the model are not in {plan.path!r}: "
            f"{listing(plan.missing)}; {both}. The file was saved from another network, or these layers were "
            f"renamed; skip them (init_checkpoint.skip) or set init_checkpoint.allow_missing: true to train them "
            f"from their initial values"
        )
    if plan.unexpected and not params.get("allow_unexpected"):
        raise DslError(
            f"init_checkpoint: {len(plan.unexpected)} variables of {plan.path!r} are not in the model: "
            f"{listing(plan.unexpected)}; {both}. The file was saved from another (larger) network; set "
            f"init_checkpoint.allow_unexpected: true to ignore them"
        )


def _check_trainable_head(plan: RestorePlan, model: tf.keras.Model, params: dict[str, Any]) -> None:
    """`trainable` without a fresh head fine-tunes the old task's classifier: said, not guessed."""
    head = head_variable_names(model)
    restored_head = [n for n in head if n not in plan.skipped and n not in plan.head_reset]
    if params.get("trainable") is not None and restored_head and params.get("reset_head") is None:
        raise DslError(
            f"init_checkpoint.trainable without a fresh head: the head ({listing(sorted(restored_head))}) has the "
            f"file's values, so training would start from the old task's classifier; add skip: [head] (or "
            f"reset_head: true) for a new task, or reset_head: false to fine-tune the restored head on purpose"
        )
