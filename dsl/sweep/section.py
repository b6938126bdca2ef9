"""The pipeline's `sweep:` section, declared to the language: its schema and its check.

The language (dsl/language/sections.py) imports this module by name when it builds the schema
or checks a pipeline, so the section is the sweep's own and the language imports nothing above it.
"""

from __future__ import annotations

from dsl.language.sections import register_section
from dsl.sweep.checks import check_sweep
from dsl.sweep.language import SWEEP_SCHEMA

register_section("sweep", SWEEP_SCHEMA, check_sweep)
