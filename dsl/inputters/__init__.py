"""Inputters every task can use: components any task may name, and what the tasks' own build on."""

# What other packages use of the inputters' shared code (validate --data, predict), public here.
from dsl.inputters.common import MODES, declared_modes
from dsl.inputters.files import TAIL_BYTES, bytes_problem, header_problem

__all__ = ["MODES", "TAIL_BYTES", "bytes_problem", "declared_modes", "header_problem"]

# What the tasks' components build on: public for them, walked by no registry (see
# dsl.language.registry.is_component_module).
LIBRARY = ("common", "files", "pipeline", "serving", "text_files")
