"""What a sweep costs per trial beside the training it runs: `dslrun sweep` of the quickstart pipeline.

Generates a small image set, runs a sweep of `--trials` trials (one process, or `--ranks 2` for
horovodrun trials) of pipelines/quickstart.yaml shrunk with --set, and splits each trial's wall
time (the sweep's own clock, from the launch to the exit it saw) into training — the phases' own seconds in
the trial's metrics file (train and val) — and overhead: launch, Python and TensorFlow start-up,
building the model, restoring, saving and exiting. Then the sweep's own time: its start-up
(validating the space, opening the study), between two trials (Optuna's tell and ask on SQLite,
resolving and writing trial.yaml) and its end (the report, best.yaml, the plots).

    .venv/bin/python bench/sweep_overhead.py [--trials 3] [--ranks 1] [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DSLRUN = [sys.executable, "-m", "dsl"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run([*DSLRUN, "data", "synthetic", "--out", str(root / "data"), "--num-train", "256", "--num-val", "64",
                        "--num-classes", "4", "--image-size", "16"], check=True, env=env, capture_output=True)
        (root / "tune.yaml").write_text(f"""\
extends: {ROOT / 'pipelines' / 'quickstart.yaml'}
name: bench-sweep
sweep:
  metric: val/accuracy
  max_trials: {args.trials}
  method: random
  seed: 0
  ranks_per_trial: {args.ranks}
  directory: {root / 'sweep'}
  parameters:
    modeler.optimizer.learning_rate: {{type: log_uniform, low: 0.01, high: 0.5}}
""", encoding="utf-8")
        started = time.time()
        result = subprocess.run([*DSLRUN, "sweep", str(root / "tune.yaml"), "--set", f"runner.max_epochs={args.epochs}",
                                 "--set", "inputter.batch_size=32", "--set", "inputter.num_classes=4",
                                 "--set", "inputter.image_shape=[16, 16, 3]"],
                                env={**env, "DATA_DIR": str(root / "data")}, capture_output=True, text=True, cwd=root)
        ended = time.time()
        if result.returncode != 0:
            sys.exit(f"the sweep failed:\n{result.stderr}")
        trials = [_trial(path) for path in sorted((root / "sweep").glob("trial-*"))]
        for number, (start, end, training) in enumerate(trials):
            print(f"trial {number}: {end - start:.1f} s, training {training:.1f} s, overhead {end - start - training:.1f} s")
        overhead = statistics.median(end - start - training for start, end, training in trials)
        training = statistics.median(training for _, _, training in trials)
        gaps = [trials[i + 1][0] - trials[i][1] for i in range(len(trials) - 1)]
        print(f"sweep start-up (command to first launch) {trials[0][0] - started:.1f} s, end (report, best.yaml, plots) "
              f"{ended - trials[-1][1]:.1f} s")
        print(f"| sweep, {args.ranks} rank(s) per trial, {args.trials} trials of {args.epochs} epochs | overhead per trial "
              f"{overhead:.1f} s (median) | training per trial {training:.1f} s | the sweep between two trials "
              f"{statistics.median(gaps) if gaps else 0:.2f} s |")


def _trial(path: Path) -> tuple[float, float, float]:
    """(launch, end, training seconds): trial.yaml is written just before the launch, the sweep's own clock
    (user attribute `seconds`: launch to the exit it saw) gives the end, and the phases' own seconds in
    the trial's metrics file are the training."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    number = int(path.name.split("-")[1])
    study = optuna.load_study(study_name="bench-sweep", storage=f"sqlite:///{path.parent / 'study.db'}")
    seconds = float(study.trials[number].user_attrs["seconds"])
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    training = sum(float(r.get("seconds", 0.0)) for r in records)
    launch = (path / "trial.yaml").stat().st_mtime
    return launch, launch + seconds, training


if __name__ == "__main__":
    main()
