"""Networks every task can use: components any task may name, and what the tasks' own build on."""

# Which layers are a network's head and backbone (fine-tuning's `skip`, `trainable`, the L2 of
# frozen layers, `show --variables`): public here for the callbacks, modelers and commands.
from dsl.networks._groups import (
    GROUPS,
    declare_head,
    frozen_for_fine_tuning,
    head_layer_names,
    head_variable_names,
    mark_frozen,
)

__all__ = ["GROUPS", "declare_head", "frozen_for_fine_tuning", "head_layer_names", "head_variable_names", "mark_frozen"]

# What the tasks' components build on: public for them, walked by no registry (see
# dsl.language.registry.is_component_module).
LIBRARY = ("common",)
