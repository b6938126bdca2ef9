"""The checkpoint a user names (`--checkpoint`, `--resume-from`), checked before TensorFlow loads.

A checkpoint is a prefix (`runs/x/checkpoints/ckpt-40`) whose files are `<prefix>.index` and
`<prefix>.data-00000-of-00001`; users name either file as often as the prefix, and a mistyped
path should fail at once, not after the ten seconds TensorFlow's import takes.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from dsl.language.errors import DslError

_FILE = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def named_prefix(path: str) -> str:
    """The prefix whose `.index` or data file `path` names (when that prefix's .index exists), else `path`."""
    prefix = _FILE.sub("", path)
    return prefix if prefix != path and Path(f"{prefix}.index").is_file() else path


def given_checkpoint(path: str, option: str) -> str:
    """`path` as a directory or a prefix (a prefix's `.index` or data file is taken for the prefix);
    a DslError naming `option` when it is neither. Which checkpoint a directory holds is TensorFlow's
    to say (dsl.engine.checkpointing.resolve_checkpoint)."""
    if Path(path).is_dir():
        return path
    prefix = _FILE.sub("", path)
    if Path(f"{prefix}.index").exists():
        return prefix
    raise DslError(f"{option} {path}: no such checkpoint (expected a directory or a prefix with {prefix}.index)"
                   f"{_same_name_nearby(prefix)}")


def _same_name_nearby(prefix: str) -> str:
    """`; did you mean RUN/checkpoints/ckpt-90?` when a run's folders hold a checkpoint of the name
    given beside them (trial B11 wrote runs/ft59/ckpt-90 for runs/ft59/checkpoints/ckpt-90)."""
    given = Path(prefix)
    for run in (given.parent, given.parent.parent):
        for folder in ("checkpoints", "best"):
            candidate = run / folder / given.name
            if candidate != given and Path(f"{candidate}.index").exists():
                return f"; did you mean {candidate}?"
    return ""


def run_of(checkpoint: str) -> Path | None:
    """The run directory that wrote `checkpoint` (a prefix or a directory: its checkpoints/ or
    best/ folder, or the run directory itself), when it holds the run's pipeline.yaml."""
    path = Path(checkpoint)
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, folder.parent):
        if (candidate / "pipeline.yaml").is_file():
            return candidate
    return None


def trained_section(run: Path, section: str) -> dict[str, Any] | None:
    """A section of the pipeline the run in `run` used (its pipeline.yaml), if readable."""
    path = run / "pipeline.yaml"
    try:
        stored = _stored_pipeline(str(path), path.stat().st_mtime_ns)
    except OSError:
        return None
    found = stored.get(section) if isinstance(stored, dict) else None
    return found if isinstance(found, dict) else None


@functools.lru_cache(maxsize=8)
def _stored_pipeline(path: str, mtime_ns: int) -> Any:
    """A run's pipeline.yaml, parsed once per version: validate's checks of one callback each ask it."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None


def trained_classes(run: Path) -> list[str] | None:
    """The class names the run in `run` declared (its pipeline.yaml's inputter), if any."""
    from dsl.language.rules import declared_classes

    return declared_classes(trained_section(run, "inputter") or {})


def other_task(checkpoint: str, classes: list[str] | None) -> str | None:
    """Why `checkpoint` was trained for another task than one of `classes`: its run named other
    classes (a trial evaluated a digits 0-4 model on digits 5-9, 0.17, without a word, and predict
    called a four "nine"). None when they agree or either side names none."""
    run = run_of(checkpoint)
    theirs = trained_classes(run) if run is not None else None
    if not classes or not theirs or list(classes) == theirs:
        return None
    shown = ", ".join(theirs[:10]) + (", ..." if len(theirs) > 10 else "")
    return f"it was trained by {run} on other classes ({shown})"
