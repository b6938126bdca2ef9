"""The compiled files autograph leaves in the temporary directory, removed when the process ends.

Autograph writes each function it converts (about 36 in a small run) as a module
`__autograph_generated_file*.py` in the temporary directory and imports it; Python then caches
its bytecode beside it, in `<tmp>/__pycache__/`, unless bytecode writing is off. TensorFlow
removes the `.py` files at exit but not the `.pyc` files, so every dslrun process (each rank,
each trial of a sweep) left its own behind, for good. `install()` removes them at exit too. A
process that is killed (SIGKILL) runs no exit handler: what it leaves stays, as TensorFlow's own
files do.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

_PREFIX = "__autograph_generated_file"


def remove_compiled() -> None:
    """Remove the bytecode Python cached for this process's autograph modules."""
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if name.startswith(_PREFIX) and spec is not None and spec.cached:
            with contextlib.suppress(OSError):
                os.remove(spec.cached)


def install() -> None:
    """Run `remove_compiled` when the process exits (dsl.engine calls this once, when first imported)."""
    atexit.register(remove_compiled)
