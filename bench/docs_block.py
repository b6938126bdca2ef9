"""A bench's table written into docs/benchmarks.md between its two markers.

Each bench that records a result owns a block `<!-- NAME:begin -->` ... `<!-- NAME:end -->` of
the page; a rerun replaces the block and nothing else, so the prose around it (how the figure
was measured, what it means) stays as written. A page without the block gets it at its end,
under `heading`.
"""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def put_block(name: str, table: str, heading: str, page: Path = BENCHMARKS) -> None:
    """Replace the text between `name`'s markers on `page` by `table` (or append it, headed)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    block = f"{begin}\n{table.rstrip()}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += f"\n## {heading}\n\n{block}\n"
    page.write_text(text, encoding="utf-8")
