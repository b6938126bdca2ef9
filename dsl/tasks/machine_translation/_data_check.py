"""A parallel corpus summed up for `dslrun validate --data`: pairs, lengths per side, outliers, copies.

Every bad line (a line-count mismatch, an empty side, a TSV line without its tab) is an error
at its file and line, all of them, not the first only. The lengths are counted in the subword
tokens the run will see: a SentencePiece model is trained here on the train split with the
section's settings (deterministic: the model the run trains), or the named `.model` is read. So
"12 pairs over max_length" here means the run would stop at the first of them. Then, per split:

- lengths per side (median, p95, max) and the share of pairs over `max_length`;
- length-ratio outliers: pairs whose target/source token ratio is 3x off the split's median, the
  usual sign of misaligned lines (a sentence split in two on one side only);
- pairs whose target is the source unchanged (an untranslated line, a copy-paste);
- val/test pairs copied from train (the shared digest check).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from dsl.data_check.examples import Example, Problem, Split
from dsl.language.diagnostics import Location
from dsl.tasks.machine_translation._parallel_files import Pair, describe, entries, pairs_of

RATIO_OFF = 3.0  # a pair's target/source ratio this far from the median (either way) is an outlier
_SHOWN = 3  # located examples named per finding


def split_of(params: dict[str, Any], mode: str) -> Split:
    """The pairs of `mode` as examples (no class; a digest of the pair) and every bad line as a problem."""
    pairs: list[Pair] = []

    def items() -> Any:
        for pair, problem in pairs_of(params[mode], f"inputter.{mode}"):
            if problem is not None:
                yield Problem(problem)
                continue
            assert pair is not None
            pairs.append(pair)
            digest = hashlib.sha1(f"{pair.source}\t{pair.target}".encode()).digest()
            yield Example(None, pair.where, Location(pair.path, pair.line, 1), digest=digest)

    findings: dict[str, Any] = {}

    def examine(resolved: dict[str, Any]) -> dict[str, Any]:
        if "lines" not in findings:
            findings.update(_findings(pairs, params, mode))
        return findings

    return Split(items(), source=", ".join(describe(entry) for entry in entries(params[mode])),
                 details=lambda resolved: examine(resolved)["lines"],
                 warnings=lambda resolved: examine(resolved)["warnings"])


def _findings(pairs: list[Pair], params: dict[str, Any], mode: str) -> dict[str, Any]:
    if not pairs:
        return {"lines": [], "warnings": []}
    tokenizers = _tokenizers(params)
    sources = [len(ids) for ids in tokenizers.encode("source", [pair.source for pair in pairs])]
    targets = [len(ids) for ids in tokenizers.encode("target", [pair.target for pair in pairs])]
    limit = params["max_length"]
    over = [pair for pair, s, t in zip(pairs, sources, targets) if max(s, t) > limit]
    ratios = [t / max(s, 1) for s, t in zip(sources, targets)]
    median = sorted(ratios)[len(ratios) // 2] or 1.0
    outliers = [pair for pair, r in zip(pairs, ratios) if r > median * RATIO_OFF or r * RATIO_OFF < median]
    copies = [pair for pair in pairs if pair.source == pair.target]
    lines = [f"source tokens {_spread(sources)}", f"target tokens {_spread(targets)}",
             f"{len(over) / len(pairs):.1%} of pairs over max_length {limit}",
             f"target/source length ratio median {median:.2f}, {len(outliers)} pairs {RATIO_OFF:g}x off it",
             f"{len(copies)} pairs with the target the source unchanged"]
    warnings: list[tuple[tuple[str | int, ...], str]] = []
    if over:
        what = ("skip_long leaves them out" if params["skip_long"] else
                f"the run stops at the first: raise max_length (95% of targets have at most {_p95(targets)} tokens) "
                "or set skip_long: true")
        warnings.append((("inputter", "max_length"), f"{len(over)} pairs have a side over max_length {limit} subword "
                         f"tokens ({_where(over)}); {what}"))
    if outliers:
        warnings.append((("inputter", mode), f"{len(outliers)} pairs have a target/source length ratio "
                         f"{RATIO_OFF:g}x off the median {median:.2f} ({_where(outliers)}): often misaligned lines; "
                         "check them"))
    if copies:
        warnings.append((("inputter", mode), f"{len(copies)} pairs have the target identical to the source "
                         f"({_where(copies)}): untranslated lines teach the model to copy"))
    return {"lines": lines, "warnings": warnings}


_MADE: dict[str, Any] = {}  # the models made for a section, once for all its splits


def _tokenizers(params: dict[str, Any]) -> Any:
    """The models the run would use: the named ones, else trained on the train split as the run trains them."""
    from dsl.tasks.machine_translation._sentencepiece import run_tokenizers, settings_of

    key = repr((settings_of(params), params["train"]))
    if key not in _MADE:
        train = [pair for pair, _ in pairs_of(params["train"], "inputter.train") if pair is not None]
        texts = ([pair.source for pair in train], [pair.target for pair in train]) if train else None
        with tempfile.TemporaryDirectory(prefix="dslrun-validate-") as scratch:
            _MADE[key] = run_tokenizers(params, texts, Path(scratch), is_chief=False)
    return _MADE[key]


def _spread(lengths: list[int]) -> str:
    ordered = sorted(lengths)
    return f"median {ordered[len(ordered) // 2]}, 95% {_p95(lengths)}, max {ordered[-1]}"


def _p95(lengths: list[int]) -> int:
    ordered = sorted(lengths)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def _where(pairs: list[Pair]) -> str:
    shown = ", ".join(f"{pair.path} line {pair.line}" for pair in pairs[:_SHOWN])
    return shown + (", ..." if len(pairs) > _SHOWN else "")
