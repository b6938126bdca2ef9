"""Modelers every task can use: components any task may name, and what the tasks' own build on."""

# What the tasks' components build on: public for them, walked by no registry (see
# dsl.language.registry.is_component_module).
LIBRARY = ("classification", "class_keys", "mask_records")
