"""Inputters components: one module per registered type (see dsl.language.registry)."""

# What other packages use of the inputters' shared code (validate --data, predict), public here.
from dsl.inputters._common import MODES, declared_modes
from dsl.inputters._files import TAIL_BYTES, bytes_problem, header_problem
from dsl.inputters._text import token_count

__all__ = ["MODES", "TAIL_BYTES", "bytes_problem", "declared_modes", "header_problem", "token_count"]
