"""Credentials a pipeline takes from the environment: used in full, never written out.

A tracking server or a study database may be reached with a password in its URI
(`tracking_uri: http://bob:${MLFLOW_PASSWORD}@host`). Run directories, `dslrun show`, MLflow's
parameters and a sweep's files are read by whole teams, so a value that came from a `${NAME}`
reference is kept as that reference wherever dslrun writes the pipeline when

- the reference sits in a URI's user information (between `scheme://` and `@`), or
- the variable's name says it is a secret (PASSWORD, PASSWD, TOKEN, SECRET, KEY, CREDENTIAL).

The resolver remembers each such string (`remember`: its pipeline path, its value with every
reference substituted, and its text with the secret references kept); `redacted` gives a resolved
pipeline back with those strings written as references, when they still hold the substituted value
(a `--set` may have replaced one). The saved `pipeline.yaml` then reads the variable again when a
run resumes from it. Better still are the tools' own variables (`MLFLOW_TRACKING_USERNAME` and
`MLFLOW_TRACKING_PASSWORD`, `PGPASSWORD`, `~/.pgpass`), which never enter the pipeline at all.
"""

from __future__ import annotations

import re
from typing import Any

SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|KEY|CREDENTIAL", re.IGNORECASE)
# Before a reference: `scheme://` and then no `/` or `@` (still inside the user information).
_USERINFO_BEFORE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*$")

JsonPath = tuple[str | int, ...]

# path -> (the string as substituted, the same with its secret references kept); process-wide, as
# a process resolves its pipeline once (validate resolves several: their paths rarely collide, and
# a collision needs the same substituted value too).
_REMEMBERED: dict[JsonPath, tuple[str, str]] = {}


def is_secret(name: str, text: str, start: int, end: int) -> bool:
    """Whether the reference to `name` at text[start:end] stands for a credential."""
    if SECRET_NAME.search(name):
        return True
    return bool(_USERINFO_BEFORE.search(text[:start])) and "@" in text[end:].split("/", 1)[0]


def remember(path: JsonPath, substituted: Any, kept: str) -> None:
    """The string at `path` became `substituted`; written out, it is `kept` (its secret references as written)."""
    if isinstance(substituted, str) and substituted != kept:
        _REMEMBERED[path] = (substituted, kept)


def redacted(resolved: dict[str, Any]) -> dict[str, Any]:
    """A copy of `resolved` with every remembered credential written as its `${NAME}` reference."""
    found: dict[str, Any] = resolved
    for path, (substituted, kept) in _REMEMBERED.items():
        if _get(found, path) == substituted:
            if found is resolved:
                import copy

                found = copy.deepcopy(resolved)
            _set(found, path, kept)
    return found


def redact_text(text: str) -> str:
    """`text` (a message naming a URI) with every remembered credential's string replaced by its written form."""
    for substituted, kept in _REMEMBERED.values():
        text = text.replace(substituted, kept)
    return text


def _get(tree: Any, path: JsonPath) -> Any:
    for key in path:
        try:
            tree = tree[key]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


def _set(tree: Any, path: JsonPath, value: Any) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value
