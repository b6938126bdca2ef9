"""`did you mean 'momentum'?` — the nearest known name to a misspelt one."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CUTOFF = 0.6


def closest(word: Any, candidates: Iterable[Any]) -> str | None:
    """The candidate nearest to `word` (case-insensitive), or None when none is close enough."""
    if not isinstance(word, str):
        return None
    names = [str(c) for c in candidates]
    by_lower = {n.lower(): n for n in names}
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=CUTOFF)
    return by_lower[matches[0]] if matches else None


def did_you_mean(word: Any, candidates: Iterable[Any]) -> str:
    """"; did you mean 'x'?" to append to a message, or "" when nothing is close."""
    match = closest(word, candidates)
    return f"; did you mean {match!r}?" if match is not None and match != word else ""


def path_did_you_mean(path: str, usable: Callable[[Path], bool] | None = None) -> str:
    """`; did you mean runs/base04/best?` when `path` with its first missing part replaced by the
    closest name beside it exists (trial B13 wrote runs/base4/best, A12 trian.csv); else "".
    A missing folder on the way is matched among folders only, and the last part among the names
    `usable` accepts (a checkpoint path is offered no `base.yaml` for `base`)."""
    parts = Path(path).parts
    for depth, part in enumerate(parts):
        if Path(*parts[: depth + 1]).exists():
            continue
        parent = Path(*parts[:depth])
        try:
            names = os.listdir(parent)
        except OSError:
            return ""
        if depth < len(parts) - 1:
            names = [name for name in names if (parent / name).is_dir()]
        elif usable is not None:
            names = [name for name in names if usable(parent / name)]
        name = closest(part, names)
        candidate = Path(*parts[:depth], name, *parts[depth + 1:]) if name else None
        if candidate is not None and (candidate.exists() or Path(f"{candidate}.index").exists()):
            return f"; did you mean {candidate}?"
        return ""
    return ""
