"""A few bench cases side by side, for one question at a time (what `make bench` runs, narrowed).

    python bench/side_by_side.py --group replica_state|threads|tasks [--repeats 3] [--steps 30]

The cases of a group are interleaved repetition by repetition (bench/run.py's `interleaved`),
so the load of this shared host hits them alike; it prints each case's images/s, CPU seconds
per step, CPU seconds per thread and wall time outside the compiled call, the paired ratios
the group is about (median, min-max), and the load average before and after, then the JSON.

- `replica_state` (issue 29): dslrun np2 under Horovod with batch-norm statistics averaged
  where read (dslrun now), after every call (before), never (the floor), and the collective
  backend's np2.
- `threads`: one process, the P1 case (dslrun, fit, loop) at TensorFlow's default threads and
  dslrun at other inter-op/intra-op settings, batch per core and oneDNN off, with the
  machine's convolution peak (bench/peak.py) measured in each repetition.
- `tasks`: P6 alone, the segmentation, text, detection and translation pipelines as dslrun, `fit`
  and the loop, and translation's search alone (beam 4, greedy) (bench/run.py's task cases;
  `--cases text_dslrun text_loop ...` narrows it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run
from cases import load_average

RATIOS = {
    "replica_state": [("np2_read", "np2_never"), ("np2_every_call", "np2_never"), ("np2_read", "np2_every_call"),
                      ("collective_np2", "np2_read")],
    "threads": [("fit", "dslrun"), ("loop", "dslrun"), ("dslrun_inter1", "dslrun"), ("dslrun_intra1", "dslrun"),
                ("dslrun_b128", "dslrun"), ("dslrun_onednn_off", "dslrun")],
    "tasks": [*((f"{task}_dslrun", f"{task}_{reference}") for task in run.TASK_DATA for reference in ("fit", "loop")),
              ("translation_decode_beam4", "translation_decode_beam1")],
}


def cases(group: str, steps: list[str]) -> dict[str, run.Case]:
    if group == "tasks":
        return run.task_cases(steps)
    if group == "replica_state":
        per_rank = ["--case", "dslrun", "--batch", "32", *steps]
        return {"np2_read": (per_rank, 2), "np2_every_call": ([*per_rank, "--reconcile-every-call"], 2),
                "np2_never": ([*per_rank, "--no-reconcile"], 2),
                "collective_np2": ([*per_rank, "--backend", "collective"], 2)}
    single = ["--batch", "64", *steps]
    return {"dslrun": (["--case", "dslrun", *single], 1), "fit": (["--case", "fit", *single], 1),
            "loop": (["--case", "loop", *single], 1),
            "dslrun_inter1": (["--case", "dslrun", "--inter", "1", *single], 1),
            "dslrun_intra1": (["--case", "dslrun", "--threads", "1", *single], 1),
            "dslrun_b128": (["--case", "dslrun", "--batch", "128", *steps], 1),
            "dslrun_onednn_off": (["--case", "dslrun", "--env", "TF_ENABLE_ONEDNN_OPTS=0", *single], 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", required=True, choices=sorted(RATIOS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", default="5")
    parser.add_argument("--steps", default="30")
    parser.add_argument("--cases", nargs="*", help="only these cases of the group")
    args = parser.parse_args()
    loads = [load_average()]
    peaks: list[dict] | None = [] if args.group == "threads" else None
    chosen = cases(args.group, ["--warmup", args.warmup, "--steps", args.steps])
    chosen = {name: case for name, case in chosen.items() if not args.cases or name in args.cases}
    results = run.interleaved(chosen, args.repeats, peaks)
    loads.append(load_average())
    for name, runs in results.items():
        print(f"{name}: images/s {[round(r['images_per_second'], 1) for r in runs]}, CPU s/step "
              f"{[round(r['cpu_seconds_per_step'], 3) for r in runs]}, outside the call ms/step "
              f"{[round(r['between_calls_ms_per_step'] or 0, 1) for r in runs]}, threads {runs[-1]['cpu_seconds_by_thread']}")
    for a, b in RATIOS[args.group]:
        if a in results and b in results:
            print(f"{a} / {b}: images/s {run.fmt(run.ratio(results, a, b), 3)}, CPU per image {b} / {a} "
                  f"{run.fmt(run.cpu_ratio(results, a, b), 3)} (above 1: {a} costs less)")
    if peaks:
        print("conv peak GFLOP/s per repetition:", [round(p["conv_gflops"]["best"], 1) for p in peaks])
    print("load average before / after:", loads)
    print(json.dumps({"group": args.group, "loads": loads, "peaks": peaks, "results": results}))


if __name__ == "__main__":
    main()
