"""User-facing errors: the CLI prints them as one located line, never as a traceback.

Every error a user can cause derives from `DslError`, so the CLI catches one class
(`dsl.commands._common.user_errors`) and a new error family cannot leak a traceback by
being forgotten there. Errors of the program itself (bugs) stay ordinary exceptions.

    DslError             a bad file, a missing checkpoint, bad data: one line
    ├── LocatedError     problems with a place in a pipeline file: one line each
    │   ├── dsl.language.loader.LoadError        a file or --set value that is not a pipeline tree
    │   └── dsl.language.pipeline.PipelineError  a pipeline with errors (schema, extends, checks)
    ├── RegistryError                   an unknown type, or a type registered twice
    └── dsl.language.plugins.PluginError         a plugin that cannot be imported
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsl.language.diagnostics import Diagnostic


class DslError(Exception):
    """Something the user can fix (a bad file, a missing checkpoint, bad data).

    The message says what happened, what was expected and how to fix it; the CLI prints
    `dslrun: error: <message>` and exits 1.
    """


class LocatedError(DslError):
    """Errors that each point at a file, line and column; `diagnostics` holds every one (and any warnings).

    The CLI prints each diagnostic as `file:line:col: error: path: message`, the format
    `dslrun validate` uses, so editors jump to the place.
    """

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(d.format_text() for d in diagnostics))
        self.diagnostics = diagnostics


class RegistryError(DslError, LookupError):
    """A type that is unknown, or registered twice (a plugin's name clashing with another's):
    of a component (dsl.language.registry) or a backend (dsl.language.backend_registry)."""


def clean_error(message: str) -> str:
    """The line of a TensorFlow error that says what went wrong.

    Eager errors read `{{function_node ...}} <what> [[{{node ...}}]] [Op:...]`; errors from
    inside a tf.function add `Graph execution error:` and a stack before `<what>`, and errors
    from a map function (TF >= 2.16) `Error in user-defined function passed to ...: `.
    """
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message).split("\n\t [[")[0].split(" [Op:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _MAP_PREFIX.sub("", lines[-1]) if lines else message.strip()


# TensorFlow >= 2.16 puts this before an error raised inside a Dataset.map function.
_MAP_PREFIX = re.compile(r"^Error in user-defined function passed to \S+ transformation with iterator: \S+: ")
