"""User-facing errors: the CLI prints them as one located line, never as a traceback."""

from __future__ import annotations


class DslError(Exception):
    """Something the user can fix (a bad file, a missing checkpoint, bad data).

    The message says what happened, what was expected and how to fix it; the CLI prints
    `dslrun: error: <message>` and exits 1.
    """
