"""UTF-8 text files as the text inputters read them: decoded, or an error naming the line.

Shared by every task that reads text (text classification, translation) and by `dslrun
validate --data`, so a file that is not UTF-8 gets the same located message everywhere. Pure Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsl.language.errors import DslError


def decoded(data: bytes, path: Path | str) -> str:
    """`data` as UTF-8 text (a byte-order mark dropped), or an error naming the file and line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, problem = utf8_problem(data, exc)
        raise DslError(f"{path} line {line}: {problem}") from None


def utf8_problem(data: bytes, exc: UnicodeDecodeError) -> tuple[int, str]:
    """The line where `data` stops being UTF-8, and what to do about it."""
    line = data[: exc.start].count(b"\n") + 1
    return line, f"not UTF-8 text ({exc.reason} at byte {exc.start}); save the file as UTF-8"


def predict_texts(paths: list[str], texts: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """`dslrun predict`'s inputs of a text pipeline: each --text, then each non-blank line of each file,
    as records naming their file and line; and a line per unreadable file."""
    sources: list[dict[str, Any]] = [{"text": text} for text in texts]
    problems = []
    for path in paths:
        try:
            content = decoded(Path(path).read_bytes(), path)
        except OSError as exc:
            problems.append(f"cannot read file {path}: {exc.strerror or exc}")
            continue
        except DslError as exc:
            problems.append(f"cannot read file {exc}")
            continue
        lines = [line.rstrip("\r") for line in content.split("\n")]
        sources += [{"file": path, "line": number, "text": line} for number, line in enumerate(lines, 1) if line.strip()]
    return sources, problems
