"""`make bench-sync-bn`: what synchronised batch norm costs a two-rank step, by per-rank batch.

`sync_batch_norm: auto` turns it on below 16 examples per replica (dsl/distributed/sync_batch_norm.py);
this measures the price of that default where it applies: images/s of `horovodrun -np 2`
with and without `runner.horovod.sync_batch_norm`, the same ResNet-20 (the quickstart's
network, 19 batch-norm layers) and synthetic data, per-rank batches 8 and 16. The cases
run side by side in one invocation, their order rotated every repetition (bench/run.py's
`interleaved`), and the ratio is taken per repetition, so load from the other processes
of a shared host hits both sides of it alike.

Wall-clock images/s swing with the neighbours' load on a shared host; CPU seconds per step
of each rank barely do, so their ratio is reported beside it.

    python bench/sync_bn_cost.py [--repeats 3] [--batches 8,16] [--table-from JSON]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from run import interleaved, ratio  # noqa: E402  (bench/ is put on the path above)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="8,16", help="per-rank batches to measure")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--table-from", metavar="JSON", help="print the table of an earlier run's JSON")
    args = parser.parse_args()
    if args.table_from:
        print(table(json.loads(Path(args.table_from).read_text()), args.batches.split(",")))
        return
    steps = ["--warmup", "10", "--steps", "40", "--depth", str(args.depth)]
    cases = {}
    for batch in args.batches.split(","):
        common = ["--case", "dslrun", "--batch", batch, *steps]
        cases[f"np2_b{batch}"] = (common, 2)
        cases[f"np2_b{batch}_sync_bn"] = ([*common, "--sync-bn"], 2)
    results = interleaved(cases, args.repeats)
    out = ROOT / "bench-results" / f"sync-bn-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(table(results, args.batches.split(",")))


def table(results: dict[str, list[dict]], batches: list[str]) -> str:
    """Per batch: images/s without and with (median, range), the paired speed ratio, and the
    paired ratio of CPU seconds per step (with / without: what synchronising adds to a step)."""
    lines = ["| per-rank batch | images/s without | images/s with sync BN | speed with / without | "
             "CPU s per step with / without |", "|---|---|---|---|---|"]

    def span(values: list[float], digits: int = 1) -> str:
        values = sorted(values)
        return f"{statistics.median(values):.{digits}f} ({values[0]:.{digits}f}–{values[-1]:.{digits}f})"

    for batch in batches:
        plain, synced = f"np2_b{batch}", f"np2_b{batch}_sync_bn"
        speeds = [span([r["images_per_second"] for r in results[name]]) for name in (plain, synced)]
        paired = ratio(results, synced, plain)
        cpu = [s["cpu_seconds_per_step"] / p["cpu_seconds_per_step"] for s, p in zip(results[synced], results[plain])]
        lines.append(f"| {batch} | {speeds[0]} | {speeds[1]} | {paired['median']:.2f} ({paired['min']:.2f}–"
                     f"{paired['max']:.2f}) | {span(cpu, 2)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
