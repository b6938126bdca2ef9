"""`make bench-quality`: every shipped pipeline at 1, 2 and 4 ranks, the val metric it ends with.

Distributed training must not give a worse model than one process. Each shipped file is
trained as a user starts it — `dslrun FILE`, `horovodrun -np N --gloo dslrun FILE`,
`dslrun launch --backend collective --workers N FILE` (a `backend: ps` file: `dslrun launch
--backend ps --workers N --ps 1`) — on data generated here, for the same epochs (or
iterations) at every size; only what the table says is `--set`. 4 ranks on 2 cores are
oversubscribed: this measures quality, not speed. Results: bench-results/quality-<time>.json
and a Markdown table; `--write-docs` puts it in docs/benchmarks.md between its markers.

    python bench/quality.py [--pipelines quickstart.yaml,...] [--ranks 1,2,4] [--write-docs]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from docs_block import publish  # noqa: E402

BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "TF_CPP_MIN_LOG_LEVEL": "3",
       "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# data set -> the `dslrun data` command that writes it (its defaults: the sets the README names).
DATASETS: dict[str, list[str]] = {
    "images": ["synthetic"],
    # cifar10's cut (below): five times the train images, so its 8 epochs are 624 steps, not 120.
    "images_10k": ["synthetic", "--num-train", "10000"],
    "small": ["synthetic", "--image-size", "16"],
    "shapes": ["synthetic-segmentation"],
    "reviews": ["synthetic-text"],
    "boxes": ["synthetic-detection"],
}

# 164 epochs of ResNet-32 do not fit here. The cut: 8 epochs of 10,000 images, the shipped
# schedule's decays at 4 and 6, the quickstart's batch-norm momentum (the shipped 0.99 leaves the
# moving statistics far behind the weights in a run this short). On the README's 2000 images the
# 8 epochs were 120 steps at 0.1 without warmup, chaotic: one process ended 0.44-0.95 by seed
# alone (docs/benchmarks.md, "Moving a pipeline to N ranks").
CIFAR10_CUT = ["runner.max_epochs=8", "modeler.lr_schedule.boundaries=[4, 6]", "network.batch_norm_momentum=0.9"]

# pipeline -> (data set, settings): the shipped file's own length unless it is too long for here.
PIPELINES: dict[str, tuple[str, list[str]]] = {
    "quickstart.yaml": ("images", []),
    "cifar10.yaml": ("images_10k", CIFAR10_CUT),
    "cifar10_ps.yaml": ("images_10k", CIFAR10_CUT),
    "cnn_iters.yaml": ("images", ["runner.max_iters=300", "runner.workflow=[[train, 100], [val, 1]]"]),
    "mlp_folder.yaml": ("folder", []),
    "segmentation.yaml": ("shapes", []),
    "text_classification.yaml": ("reviews", []),
    "detection.yaml": ("boxes", []),
}


def generate(root: Path, names: set[str], image_count: int | None = None) -> dict[str, Path]:
    """The data sets `names` (of PIPELINES' first column) under `root`; `image_count`: the train
    images of the 32-pixel image sets instead of their own count (a longer study of one row)."""
    wanted = {"small" if name == "folder" else name for name in names}
    paths: dict[str, Path] = {}
    for name in sorted(wanted):
        command = list(DATASETS[name])
        if image_count and name.startswith("images"):
            command = ["synthetic", "--num-train", str(image_count)]
        paths[name] = root / name
        subprocess.run([sys.executable, "-m", "dsl", "data", *command, "--out", str(paths[name])],
                       check=True, env=ENV, capture_output=True)
    if "folder" in names:
        from dsl.datasets.layout import class_folders

        paths["folder"] = class_folders(paths["small"], root / "folder")
    return paths


def is_ps(name: str) -> bool:
    """Whether the shipped file trains on a parameter-server cluster (its cells are ps:N, not the launchers)."""
    return "backend: ps" in (ROOT / "pipelines" / name).read_text()


def launcher(name: str, ranks: int, kind: str) -> list[str]:
    if kind == "ps":
        return ["dslrun", "launch", "--backend", "ps", "--workers", str(ranks), "--ps", "1"]
    if ranks == 1:
        return ["dslrun"]
    if kind == "horovod":
        return ["horovodrun", "-np", str(ranks), "--gloo", "dslrun"]
    return ["dslrun", "launch", "--backend", "collective", "--workers", str(ranks)]


def train(name: str, ranks: int, kind: str, data: Path, run_dir: Path, seed: int | None = None) -> dict:
    """One run to its end; its final val record (or why it failed)."""
    # Warn, not stop, on a diverging loss: the table reports what a run ends with.
    sets = [*PIPELINES[name][1], f"runner.model_dir={run_dir}", "runner.divergence.action=warn",
            *([f"seed={seed}"] if seed is not None else [])]
    command = [*launcher(name, ranks, kind), str(ROOT / "pipelines" / name),
               *[arg for setting in sets for arg in ("--set", setting)]]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**ENV, "DATA_DIR": str(data), "CIFAR10_DIR": str(data)}, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=3600)
    finally:  # every rank the launcher started goes with it, also when this script is stopped
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    seconds = round(time.monotonic() - started, 1)
    if process.returncode != 0:
        tail = (stdout + stderr).strip().splitlines()[-3:]
        return {"ok": False, "seconds": seconds, "error": " | ".join(tail)}
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["mode"] == "val"][-1]
    metric = next(name for name in ("mean_iou", "map", "accuracy") if name in val)  # COCO mAP@[.5:.95]
    diverged = "the train loss diverged" in stdout + stderr
    # The whole val record too: a per-class value near 0 (a class never learned) explains a low mean.
    return {"ok": True, "seconds": seconds, "metric": metric, "value": val[metric], "step": val["step"],
            "diverged": diverged, "val": {k: v for k, v in val.items() if isinstance(v, (int, float))}}


def table(results: list[dict]) -> str:
    """One row per pipeline: its metric at each launcher and size, the largest gap to one process,
    and how far other seeds move one process (the noise any gap is to be read against)."""
    columns = sorted({(r["kind"], r["ranks"]) for r in results if r["ranks"] > 1 and r.get("seed") is None},
                     key=lambda c: (c[0] != "horovod", c[0] != "collective", c[1]))
    header = ("| pipeline (metric) | 1 process | " + " | ".join(f"{k} x {n}" for k, n in columns)
              + " | largest gap | 1 process, other seeds |")
    lines = [header, "|" + "---|" * (len(columns) + 4)]
    for name in PIPELINES:
        seeded = [r for r in results if r["pipeline"] == name and r.get("seed") is not None and r.get("ok")]
        rows = [r for r in results if r["pipeline"] == name and r.get("seed") is None]
        if not rows:
            continue
        one = next((r for r in rows if r["ranks"] == 1), None)
        metric = next((r["metric"] for r in rows if r.get("ok")), "?")

        def cell(row: dict | None) -> str:
            if row is None:
                return "—"
            if not row.get("ok"):
                return "failed"
            return f"{row['value']:.3f}" + (" (diverged)" if row.get("diverged") else "")

        cells = [cell(next((r for r in rows if (r["kind"], r["ranks"]) == c), None)) for c in columns]
        gaps = [abs(r["value"] - one["value"]) for r in rows if one and one.get("ok") and r.get("ok") and r is not one]
        gap = f"{max(gaps):.3f}" if gaps else "—"
        spread = (f"{min(r['value'] for r in seeded):.3f}–{max(r['value'] for r in seeded):.3f}"
                  if seeded else "—")
        lines.append(f"| {name} ({metric}) | {cell(one)} | " + " | ".join(cells) + f" | {gap} | {spread} |")
    return "\n".join(lines)


def main() -> None:
    # SIGTERM unwinds like Ctrl-C: the running job's ranks and the scratch directory are removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--seeds", default="1,2", help="other seeds for one process: the noise band of the metric")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    ranks = [int(n) for n in args.ranks.split(",")]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dslrun-quality-") as scratch:
        names = args.pipelines.split(",")
        data = generate(Path(scratch) / "data", {PIPELINES[name][0] for name in names})
        for name in names:
            ps = is_ps(name)
            plan: list[tuple[str, int, int | None]] = [("ps", n, None) for n in ranks] if ps else \
                [("local", 1, None)] * (1 in ranks) + [(kind, n, None) for kind in ("horovod", "collective")
                                                       for n in ranks if n > 1]
            plan += [("ps" if ps else "local", 1, int(seed)) for seed in args.seeds.split(",") if seed]
            for kind, n, seed in plan:
                run_dir = Path(scratch) / "runs" / f"{name}-{kind}-{n}-{seed}"
                outcome = train(name, n, kind, data[PIPELINES[name][0]], run_dir, seed)
                shutil.rmtree(run_dir, ignore_errors=True)
                results.append({"pipeline": name, "kind": kind, "ranks": n, "seed": seed, **outcome})
                print(json.dumps(results[-1]), flush=True)
    publish("quality", results, table(results), "Moving a pipeline to N ranks", args.write_docs)


if __name__ == "__main__":
    main()
