"""What dslrun costs as the data grows to ImageNet's size (docs/benchmarks.md, "Cost of scale: data").

Builds listings of 10k, 100k and 1,281,167 rows (ImageNet's train split) over a few thousand
small generated PNGs, 1,000 classes, in the three forms users point dslrun at — a CSV of
`path,label` rows (the images repeated through it), an image folder (class folders of hard
links) and TFRecord shards (the PNG bytes in `tf.train.Example`s) — then measures, each
command in its own process, wall time and peak RSS (`/usr/bin/time`):

  validate   `dslrun validate --data` in full and with `--sample 5000`;
  start-up   launch to one finished train step and exit: `dslrun train` of a tiny network
             (runner.max_iters 1, no callbacks) against a hand-written tf.data reader of the
             same files and the same network (tf.data as its guide writes it: the file list or
             the records, shard, shuffle 10,000, decode, batch 64), one process, then 2
             Horovod ranks (peak RSS per rank);
  val        one val pass of 1,000 classes against 10 classes on the same images (the
             confusion matrix of 1,000 x 1,000 kept by the macro F1) and the size of the
             record it adds to metrics.jsonl;
  resume     `dslrun train` resumed at train step 0, 200 and 800 of the largest CSV: the
             position is a count of batches (a few bytes in the checkpoint), so what resume
             costs is reaching the position again.

    .venv/bin/python bench/data_scale.py [--sizes 10000,100000,1281167] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
IMAGENET = 1_281_167
CLASSES = 1000
BATCH = 64
SHUFFLE = 10_000

PIPELINE = """\
version: 1
name: data-scale
inputter:
  type: {type}
  train: {train}
  val: {val}
  num_classes: {classes}
  image_shape: [32, 32, 3]
  batch_size: {batch}
  shuffle_buffer: {shuffle}
network: {{type: mlp, hidden_units: [32]}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.01}}
callbacks: []
runner:
  max_iters: {iters}
  workflow: [[train, 1]]
  model_dir: {model_dir}
"""

HAND_WRITTEN = r'''
import csv, os, sys, time
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the Keras Horovod's TensorFlow API works with, as dslrun's
import tensorflow as tf
kind, source, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank, size = 0, 1
if ranks > 1:
    import horovod.tensorflow as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
if kind == "csv":
    folder = os.path.dirname(source)
    with open(source, newline="") as handle:
        rows = [row for row in csv.reader(handle)][1:]
    paths = [os.path.join(folder, row[0]) for row in rows]
    labels = [int(row[1]) for row in rows]
    data = tf.data.Dataset.from_tensor_slices((paths, labels))
elif kind == "folder":
    classes = sorted(os.listdir(source))
    paths, labels = [], []
    for label, name in enumerate(classes):
        for entry in sorted(os.listdir(os.path.join(source, name))):
            paths.append(os.path.join(source, name, entry))
            labels.append(label)
    data = tf.data.Dataset.from_tensor_slices((paths, labels))
if kind == "tfrecord":
    files = tf.data.Dataset.list_files(source, shuffle=False)
    if len(files) >= size:  # whole files per rank; records when there are fewer files than ranks
        data = files.shard(size, rank).interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        data = tf.data.TFRecordDataset(files).shard(size, rank)
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    def decode(record):
        parsed = tf.io.parse_single_example(record, features)
        image = tf.io.decode_png(parsed["image/encoded"], channels=3)
        return tf.image.convert_image_dtype(image, tf.float32), tf.cast(parsed["image/class/label"], tf.int32)
    data = data.shuffle(10000, seed=1)
else:
    data = data.shard(size, rank).shuffle(10000, seed=1)
    def decode(path, label):
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        return tf.image.convert_image_dtype(image, tf.float32), label
data = data.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(64, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
model = tf.keras.Sequential([tf.keras.Input((32, 32, 3)), tf.keras.layers.Flatten(),
                             tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1000)])
optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
@tf.function
def step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    if ranks > 1:
        tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if ranks > 1:  # Horovod's tensorflow2 example: broadcast after the first step
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables, root_rank=0)
    return loss
images, labels = next(iter(data))
print("loss", float(step(images, labels)))
'''


# ---------------------------------------------------------------------------------- data
def make_images(folder: Path, count: int) -> list[Path]:
    """`count` distinct 32x32 RGB PNGs of noise (small real files)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = folder / f"{index:05d}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def label_of(row: int) -> int:
    return row % CLASSES


def make_csv(out: Path, images: list[Path], rows: int, name: str) -> Path:
    """`rows` rows `path,label` repeating the images, labels cycling through the classes."""
    path = out / f"{name}.csv"
    with path.open("w") as handle:
        handle.write("path,label\n")
        for row in range(rows):
            handle.write(f"{os.path.relpath(images[row % len(images)], out)},{label_of(row)}\n")
    return path


def make_folder(out: Path, images: list[Path], rows: int) -> None:
    """Class folders c0000..c0999 of hard links to the images (ImageNet's layout)."""
    for label in range(CLASSES):
        (out / f"c{label:04d}").mkdir(parents=True, exist_ok=True)
    for row in range(rows):
        os.link(images[row % len(images)], out / f"c{label_of(row):04d}" / f"{row:07d}.png")


def make_records(out: Path, images: list[Path], rows: int) -> None:
    """TFRecord shards of about 10,000 examples each (ImageNet's are 1,250)."""
    import tensorflow as tf

    out.mkdir(parents=True, exist_ok=True)
    shards = max(1, rows // 10_000)
    encoded = [path.read_bytes() for path in images]
    writers = [tf.io.TFRecordWriter(str(out / f"train-{k:05d}-of-{shards:05d}")) for k in range(shards)]
    for row in range(rows):
        feature = {
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded[row % len(encoded)]])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label_of(row)])),
        }
        writers[row % shards].write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    for writer in writers:
        writer.close()


# ------------------------------------------------------------------------------- running
def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB of the process, its output) of one command, run under /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        start = time.perf_counter()
        result = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *argv], capture_output=True,
                                text=True, env=env, cwd=cwd)
        wall = time.perf_counter() - start
        rss = float(report.read().strip().splitlines()[-1]) / 1024
    return wall, rss, result.stdout + result.stderr + ("" if result.returncode == 0 else f"\nexit {result.returncode}")


def ranks_timed(argv: list[str], ranks: int, env: dict[str, str]) -> tuple[float, list[float], str]:
    """(wall seconds, peak RSS MB of each rank, output) of `horovodrun -np ranks argv`."""
    with tempfile.TemporaryDirectory() as folder:
        wrapped = ["sh", "-c", f'exec /usr/bin/time -f %M -o {folder}/rss.$HOROVOD_RANK "$@"', "rank", *argv]
        start = time.perf_counter()
        result = subprocess.run([str(BIN / "horovodrun"), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo",
                                 *wrapped], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        rss = [float(Path(folder, f"rss.{k}").read_text().strip().splitlines()[-1]) / 1024 for k in range(ranks)
               if Path(folder, f"rss.{k}").exists()]
    return wall, rss, result.stdout + result.stderr + ("" if result.returncode == 0 else f"\nexit {result.returncode}")


def check(ok: bool, what: str, output: str) -> None:
    if not ok or "Traceback" in output or "\nexit " in output:
        raise SystemExit(f"bench/data_scale.py: {what} failed:\n{output[-3000:]}")


def write_pipeline(folder: Path, kind: str, source: str, val: str, iters: int, classes: int = CLASSES,
                   model_dir: Path | None = None, name: str = "p") -> Path:
    inputter = {"csv": "image_classification_csv", "folder": "image_folder", "tfrecord": "tfrecord"}[kind]
    text = PIPELINE.format(type=inputter, train=f"'{source}'", val=val, classes=classes, batch=BATCH, shuffle=SHUFFLE,
                           iters=iters, model_dir=model_dir or folder / f"run-{name}")
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=f"10000,100000,{IMAGENET}")
    parser.add_argument("--images", type=int, default=5000, help="distinct PNGs the listings repeat")
    parser.add_argument("--sample", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=1, help="start-up runs per case (interleaved)")
    parser.add_argument("--full-largest", action=argparse.BooleanOptionalAction, default=True,
                        help="validate --data in full at the largest size too (CSV only; minutes)")
    parser.add_argument("--parts", default="validate,startup,ranks,val,resume", help="the parts to run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, default=ROOT / "bench-results" / "data_scale.json")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="dslrun-data-scale-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"}
    results: dict[str, list[dict]] = {"validate": [], "startup": [], "val": [], "resume": []}
    dslrun = [str(BIN / "python"), "-m", "dsl"]
    try:
        started = time.perf_counter()
        images = make_images(out / "images", args.images)
        val_csv = make_csv(out, images, 10_000, "val")
        sets: dict[tuple[str, int], str] = {}
        for size in sizes:
            folder = out / f"n{size}"
            made = folder / "made"  # a kept --out folder is reused
            if not made.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                make_csv(folder, images, size, "train")
                make_folder(folder / "train", images, size)
                make_records(folder / "records", images, size)
                made.touch()
            sets[("csv", size)] = str(folder / "train.csv")
            sets[("folder", size)] = str(folder / "train")
            sets[("tfrecord", size)] = str(folder / "records" / "train-*")
        print(f"data: {len(sizes)} sizes x 3 forms ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)

        if "validate" in parts:
            for size in sizes:
                for kind in ("csv", "folder", "tfrecord"):
                    pipeline = write_pipeline(out, kind, sets[(kind, size)], "null", 1)
                    modes = [("sample", ["--sample", str(args.sample)])]
                    if size < sizes[-1] or (args.full_largest and kind == "csv"):
                        modes.insert(0, ("full", []))
                    for mode, extra in modes:
                        wall, rss, output = timed([*dslrun, "validate", "--data", *extra, str(pipeline)], env)
                        check("examples from" in output and ": error:" not in output, f"validate --data {kind} {size}", output)
                        row = {"form": kind, "rows": size, "mode": mode, "seconds": round(wall, 2), "rss_mb": round(rss)}
                        results["validate"].append(row)
                        print(json.dumps(row), file=sys.stderr)

        hand = out / "hand_written.py"
        hand.write_text(HAND_WRITTEN)
        if "startup" in parts:
            for repeat in range(args.repeats):
                for size in sizes:
                    for kind in ("csv", "folder", "tfrecord"):
                        pipeline = write_pipeline(out, kind, sets[(kind, size)], "null", 1, name=f"s{repeat}")
                        shutil.rmtree(out / f"run-s{repeat}", ignore_errors=True)
                        cases = [("dslrun", [*dslrun, str(pipeline)]),
                                 ("tf.data", [str(BIN / "python"), str(hand), kind, sets[(kind, size)], "1"])]
                        for who, argv in cases[:: 1 if repeat % 2 == 0 else -1]:
                            wall, rss, output = timed(argv, env)
                            check("Traceback" not in output, f"{who} {kind} {size}", output)
                            row = {"form": kind, "rows": size, "who": who, "ranks": 1, "seconds": round(wall, 2),
                                   "rss_mb": [round(rss)]}
                            results["startup"].append(row)
                            print(json.dumps(row), file=sys.stderr)
        if "ranks" in parts:
            size = sizes[-1]
            for kind in ("csv", "folder", "tfrecord"):
                pipeline = write_pipeline(out, kind, sets[(kind, size)], "null", 1, name="r")
                shutil.rmtree(out / "run-r", ignore_errors=True)
                for who, argv in (("dslrun", [*dslrun, str(pipeline)]),
                                  ("tf.data", [str(BIN / "python"), str(hand), kind, sets[(kind, size)], "2"])):
                    wall, rss, output = ranks_timed(argv, 2, env)
                    check(len(rss) == 2 and "Traceback" not in output, f"2 ranks {who} {kind}", output)
                    row = {"form": kind, "rows": size, "who": who, "ranks": 2, "seconds": round(wall, 2),
                           "rss_mb": [round(r) for r in rss]}
                    results["startup"].append(row)
                    print(json.dumps(row), file=sys.stderr)
        if "val" in parts:
            results["val"] = val_pass(out, val_csv, dslrun, env)
        if "resume" in parts:
            results["resume"] = resume_cost(out, sets[("csv", sizes[-1])], dslrun, env)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **results}, indent=1))
    print(f"results: {args.json}", file=sys.stderr)


def val_pass(out: Path, val_csv: Path, dslrun: list[str], env: dict[str, str]) -> list[dict]:
    """Train 1 step, then one val pass of the 10,000 listed images at 10 and at 1,000 classes."""
    rows = []
    for classes in (10, CLASSES):
        relabelled = out / f"val{classes}.csv"
        lines = val_csv.read_text().splitlines()
        relabelled.write_text("\n".join([lines[0], *(f"{line.split(',')[0]},{int(line.split(',')[1]) % classes}"
                                                     for line in lines[1:])]) + "\n")
        model_dir = out / f"run-val{classes}"
        shutil.rmtree(model_dir, ignore_errors=True)
        pipeline = write_pipeline(out, "csv", str(relabelled), f"'{relabelled}'", 1, classes, model_dir, f"v{classes}")
        text = pipeline.read_text().replace("workflow: [[train, 1]]", "workflow: [[train, 1], [val, 1]]")
        pipeline.write_text(text.replace("callbacks: []", "callbacks: [{type: val_basic}]"))
        wall, rss, output = timed([*dslrun, str(pipeline)], env)
        check("Traceback" not in output, f"val pass at {classes} classes", output)
        records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
        val = [r for r in records if r.get("mode") == "val"]
        size = len(json.dumps(val[-1])) if val else 0
        row = {"classes": classes, "seconds": round(wall, 2), "val_seconds": val[-1].get("seconds") if val else None,
               "record_bytes": size, "rss_mb": round(rss)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def resume_cost(out: Path, train_csv: str, dslrun: list[str], env: dict[str, str]) -> list[dict]:
    """A run checkpointed at step K, resumed for one more step: the resumed run's wall against a fresh one's."""
    rows = []
    for steps in (0, 200, 800):
        model_dir = out / f"run-resume{steps}"
        shutil.rmtree(model_dir, ignore_errors=True)
        if steps:
            first = write_pipeline(out, "csv", train_csv, "null", steps, model_dir=model_dir, name="resume-a")
            first.write_text(first.read_text().replace(
                "callbacks: []", f"callbacks: [{{type: checkpoint, every_n_iters: {steps}}}]"))
            _, _, output = timed([*dslrun, str(first)], env)
            check("Traceback" not in output, f"the first {steps} steps", output)
        second = write_pipeline(out, "csv", train_csv, "null", steps + 1, model_dir=model_dir, name="resume-b")
        second.write_text(second.read_text().replace(
            "callbacks: []", f"callbacks: [{{type: checkpoint, every_n_iters: {steps + 1000}}}]"))
        wall, rss, output = timed([*dslrun, str(second)], env)
        check("Traceback" not in output, f"resume at {steps}", output)
        checkpoint = sum(p.stat().st_size for p in (model_dir / "checkpoints").glob("*")) if steps else 0
        row = {"resumed_at_step": steps, "seconds": round(wall, 2), "checkpoint_bytes": checkpoint, "rss_mb": round(rss)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


if __name__ == "__main__":
    main()
