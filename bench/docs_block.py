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


def publish(name: str, report: object, table: str, heading: str, write_docs: bool) -> Path:
    """Keep `report` as bench-results/NAME-<time>.json, print `table`, and with `write_docs` put it in the docs.

    Every bench that records a result does these three the same way, so a result is never
    in the docs without its raw figures beside it.
    """
    import json
    import time

    out = BENCHMARKS.parents[1] / "bench-results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(table)
    if write_docs:
        put_block(name, table, heading)
    return out
