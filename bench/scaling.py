"""Cost of scale: the gradient exchange on emulated links, the ring model fitted to it, the projection.

`make bench-scaling` runs this (root, about 50 minutes a repetition here). It builds up to 8 test hosts
(tests/testhosts.py: network namespaces on a bridge, each with its own sshd), measures the
bridge's round trip and what one TCP flow gets through a veth unshaped and under each token
bucket, then, for every (backend, ranks, fusion) job, launches one rank per host
(`horovodrun --gloo`, `horovodrun --mpi`, or MultiWorkerMirroredStrategy workers) running
bench/scaling_worker.py. A job goes through the link settings in phases: the links are
shaped (`tc ... tbf`) between phases while the ranks wait. The repetitions are interleaved,
job order rotated. Then it fits dsl/distributed/ring_allreduce.py's model per backend,
prints the measured table (with the model's figure and error) and the projection at 8, 64
and 512 ranks, and writes everything to bench-results/scaling-<time>.json.

Everything it makes (namespaces, qdiscs, processes, the temporary directory) is removed on
the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsl.distributed.ring_allreduce import (  # noqa: E402
    HOROVOD_FUSION_BYTES,
    Exchange,
    RingModel,
    buffers,
    efficiency,
    fit,
    link_bits_per_s,
)

HOST_NAMES = tuple(f"host{letter}" for letter in "abcdefgh")
WORKER = ROOT / "bench" / "scaling_worker.py"
PROBE = ROOT / "bench" / "scaling_probe.py"
SHAPES = ROOT / "bench" / "scaling_shapes.py"
COLLECTIVE_PORT = 23456
JOB_TIMEOUT_S = 1200.0

# Published per-accelerator step times for the projection (see docs/benchmarks.md for the sources).
NVIDIA_RN50 = "NVIDIA DeepLearningExamples, TensorFlow ResNet-50 v1.5 README, training performance (20.06 container)"
PROJECTIONS: list[dict[str, Any]] = [
    {"network": "ResNet-50", "set": "resnet50", "where": "V100, mixed precision + XLA, batch 256",
     "step_s": 256 / 1270, "source": NVIDIA_RN50, "links": ["10gbit", "25gbit", "100gbit"], "cpu": False},
    {"network": "ResNet-50", "set": "resnet50", "where": "A100, mixed precision + XLA, batch 256",
     "step_s": 256 / 2375, "source": NVIDIA_RN50, "links": ["25gbit", "100gbit"], "cpu": False},
    {"network": "ResNet-50", "set": "resnet50", "where": "V100, FP32 + XLA, batch 128",
     "step_s": 128 / 412, "source": NVIDIA_RN50, "links": ["25gbit"], "cpu": False},
    {"network": "ResNet-101", "set": "resnet101", "where": "V100 FP32, batch 64 (derived: ResNet-50's 412 img/s × 4.1/7.8 GFLOP)",
     "step_s": 64 / (412 * 4.1 / 7.8), "source": NVIDIA_RN50 + ", scaled by FLOPs", "links": ["25gbit"], "cpu": False},
    {"network": "ResNet-50", "set": "resnet50", "where": "V100 FP32, batch 32 (Goyal et al.'s 32 per GPU at NVIDIA's 412 img/s)",
     "step_s": 32 / 412, "source": NVIDIA_RN50, "links": ["50gbit"], "cpu": False},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--links", default="1gbit,2.5gbit,10gbit")
    parser.add_argument("--backends", default="gloo,mpi,collective")
    parser.add_argument("--sets", default="resnet32,resnet50")
    parser.add_argument("--fusion", default="on,off", help="Horovod's jobs: on, off or both (collective does both in one job)")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repetitions, job order rotated (one: ~50 min here)")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    parser.add_argument("--fit-only", help="a JSON this script wrote: fit and print again, measure nothing")
    args = parser.parse_args()
    if args.fit_only:
        report(json.loads(Path(args.fit_only).read_text()))
        return
    _check_machine()
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    workdir = Path(tempfile.mkdtemp(prefix="dslrun-scaling-"))
    try:
        results = measure(args, workdir, path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {path}")
    report(results)


def _check_machine() -> None:
    if os.geteuid() != 0:
        sys.exit("bench-scaling: network namespaces and tc need root")
    if shutil.which("tc") is None:
        sys.exit("bench-scaling: tc is missing: apt-get install iproute2")


# --------------------------------------------------------------------------- measuring
def measure(args: argparse.Namespace, workdir: Path, path: Path) -> dict[str, Any]:
    """Every job, every repetition; the results so far are in `path` after each job (an
    interrupted run leaves what it measured: `--fit-only PATH` reports it)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from testhosts import open_test_hosts

    ranks = [int(n) for n in args.ranks.split(",")]
    links = args.links.split(",")
    shapes_file = workdir / "shapes.json"
    print("building the networks for their gradient shapes, timing ResNet-32's CPU step ...", flush=True)
    subprocess.run([sys.executable, str(SHAPES), "--out", str(shapes_file), "--pipelines"], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    shapes = json.loads(shapes_file.read_text())
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "cores": os.cpu_count(),
                               "links": links, "shapes": {k: _describe(v) for k, v in shapes["sets"].items()},
                               "step": shapes["step"], "load_before": os.getloadavg(), "rows": []}
    jobs = [(backend, n, fusion) for backend in args.backends.split(",") for n in ranks
            for fusion in (["both"] if backend == "collective" else args.fusion.split(","))]
    with open_test_hosts(HOST_NAMES[: max(ranks)]) as hosts:
        results["probe"] = probe_links(hosts, links)
        print(json.dumps(results["probe"], indent=1), flush=True)
        for repeat in range(args.repeats):
            order = jobs[repeat % len(jobs):] + jobs[: repeat % len(jobs)]
            for backend, n, fusion in order if repeat % 2 == 0 else list(reversed(order)):
                started = time.monotonic()
                rows = run_job(hosts, workdir, shapes_file, args.sets, backend, n, fusion, links)
                for row in rows:
                    row["repeat"] = repeat
                results["rows"] += rows
                path.write_text(json.dumps({**results, "load_after": os.getloadavg()}, indent=1))
                print(f"repeat {repeat} {backend} np{n} fusion {fusion}: {time.monotonic() - started:.0f} s, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
                for row in rows:
                    print(f"   {row['link']:>7} {row['set']:>9} fp16={row['fp16']!s:5} fusion={row['fusion']:3} "
                          f"{row['median_s'] * 1000:9.1f} ms", flush=True)
        for host in hosts.hosts.values():
            host.shape(None)
    results["load_after"] = os.getloadavg()
    return results


def _describe(shapes: list[list[int]]) -> dict[str, Any]:
    sizes = [4 * _elements(shape) for shape in shapes]
    return {"tensors": len(shapes), "bytes": sum(sizes), "tensor_bytes": sizes}


def _elements(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _commit() -> str:
    result = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip()


def probe_links(hosts: Any, links: list[str]) -> dict[str, Any]:
    """Round trip hosta→hostb unshaped; one TCP flow's Gbit/s unshaped and under each link setting."""
    a, b = hosts.hosts["hosta"], hosts.hosts["hostb"]
    found: dict[str, Any] = {}
    for link in [None, *links]:
        for host in (a, b):
            host.shape(link)
        modes = [("rtt", ["--count", "3000"])] if link is None else []
        modes.append(("stream", ["--seconds", "3"]))
        for mode, extra in modes:
            server = subprocess.Popen(b.command([sys.executable, str(PROBE), "serve", b.address]),
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)
            try:
                client = a.run([sys.executable, str(PROBE), mode, b.address, *extra], timeout=60)
                server_out, _ = server.communicate(timeout=30)
            finally:
                _kill_group(server)
            key = link or "unshaped"
            entry = found.setdefault(key, {})
            entry.update(json.loads(client.stdout.strip().splitlines()[-1]))
            if mode == "stream" and server_out.strip():
                received = json.loads(server_out.strip().splitlines()[-1])
                entry["received_gbit_s"] = received["bytes"] * 8 / received["seconds"] / 1e9
    for host in (a, b):
        host.shape(None)
    return found


def run_job(hosts: Any, workdir: Path, shapes_file: Path, sets: str, backend: str, n: int, fusion: str,
            links: list[str]) -> list[dict[str, Any]]:
    """One launch of n ranks going through every link setting; its rows (one per phase, set, fp16, fusion)."""
    sync = Path(tempfile.mkdtemp(prefix=f"{backend}-np{n}-", dir=workdir))
    names = list(hosts.hosts)[:n]
    worker = [sys.executable, str(WORKER), "--shapes", str(shapes_file), "--sets", sets,
              "--phases", str(len(links)), "--sync-dir", str(sync)]
    log = open(sync / "launch.log", "w")  # noqa: SIM115 (closed in finally)
    processes: list[subprocess.Popen] = []
    try:
        if backend == "collective":
            cluster = {"worker": [f"{hosts.hosts[name].address}:{COLLECTIVE_PORT}" for name in names]}
            for index, name in enumerate(names):
                env = {**hosts.env, "TF_CPP_MIN_LOG_LEVEL": "2",
                       "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
                processes.append(subprocess.Popen(
                    hosts.hosts[name].command([*worker, "--backend", "collective", "--fusion", "both"]),
                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        else:
            launcher = ["horovodrun", f"--{backend}", "-np", str(n), "-H", ",".join(f"{name}:1" for name in names),
                        *hosts.horovodrun_args(), *worker, "--backend", "horovod", "--fusion", fusion]
            processes.append(hosts.popen(launcher, stdout=log, stderr=subprocess.STDOUT,
                                         env={**hosts.env, "TF_CPP_MIN_LOG_LEVEL": "2"}))
        for phase, link in enumerate(links):
            for name in names:
                hosts.hosts[name].shape(link)
            (sync / f"go-{phase}").write_text(link)
            _wait_phase(sync / f"done-{phase}", processes, sync / "launch.log")
        for process in processes:
            process.wait(timeout=120)
    finally:
        for process in processes:
            _kill_group(process)
        hosts.kill_strays()
        for name in names:
            hosts.hosts[name].shape(None)
        log.close()
    return collect(sync, backend, n, links)


def _wait_phase(done: Path, processes: list[subprocess.Popen], log: Path) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not done.exists():
        failed = [p for p in processes if p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-80:])
            raise RuntimeError(f"a rank failed or timed out before {done.name}:\n{tail}")
        time.sleep(0.2)


def _kill_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def collect(sync: Path, backend: str, n: int, links: list[str]) -> list[dict[str, Any]]:
    """Per (phase, set, fp16, fusion): each iteration's slowest rank, then the median over iterations."""
    per_case: dict[tuple, list[list[float]]] = defaultdict(list)
    info: dict[tuple, dict[str, Any]] = {}
    for path in sorted(sync.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (record["phase"], record["set"], record["fp16"], record["fusion"])
            per_case[key].append(record["seconds"])
            info[key] = record
    rows = []
    for key, ranks in sorted(per_case.items()):
        if len(ranks) != n:
            raise RuntimeError(f"{backend} np{n} {key}: {len(ranks)} of {n} ranks reported")
        slowest = [max(values) for values in zip(*ranks, strict=True)]
        phase, name, fp16, fusion = key
        rows.append({"backend": backend, "ranks": n, "link": links[phase], "set": name, "fp16": fp16,
                     "fusion": fusion, "tensors": info[key]["tensors"], "bytes": info[key]["bytes"],
                     "median_s": statistics.median(slowest), "iterations_s": slowest})
    return rows


# --------------------------------------------------------------------------- the fit and the tables
def exchange_of(row: dict[str, Any], shapes: dict[str, Any], cores: int, seconds: float = 0.0) -> Exchange:
    """The model's view of a measured row: Horovod fuses into 64 MiB buffers of what it sends;
    the collective backend's bytes_per_pack 0 is one pack, 1 a pack per tensor."""
    sizes = shapes[row["set"]]["tensor_bytes"]
    wire = [size // 2 for size in sizes] if row["fp16"] else sizes
    if row["fusion"] == "off":
        count = len(sizes)
    elif row["backend"] == "collective":
        count = 1
    else:
        count = buffers(wire, HOROVOD_FUSION_BYTES)
    return Exchange(ranks=row["ranks"], float32_bytes=sum(sizes), buffers=count,
                    link_bits_per_s=link_bits_per_s(row["link"]), fp16=row["fp16"],
                    ranks_per_core=row["ranks"] / cores, seconds=seconds)


def combined(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The repetitions of each cell: median of their medians, min and max (of one repetition:
    the min and max of its timed iterations)."""
    cells: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in results["rows"]:
        cells[(row["backend"], row["ranks"], row["link"], row["set"], row["fp16"], row["fusion"])].append(row)
    out = []
    for rows in cells.values():
        medians = [row["median_s"] for row in rows]
        spread = medians if len(rows) > 1 else rows[0]["iterations_s"]
        out.append({**rows[0], "median_s": statistics.median(medians), "min_s": min(spread), "max_s": max(spread),
                    "repeats": len(rows)})
    order = {"gloo": 0, "mpi": 1, "collective": 2}
    links = results["links"]
    out.sort(key=lambda r: (order.get(r["backend"], 9), links.index(r["link"]), r["ranks"], r["set"], r["fp16"],
                            r["fusion"]))
    return out


def fits(results: dict[str, Any]) -> dict[str, RingModel]:
    rows = combined(results)
    models = {}
    for backend in sorted({row["backend"] for row in rows}):
        measured = [exchange_of(row, results["shapes"], results["cores"], row["median_s"]) for row in rows
                    if row["backend"] == backend]
        models[backend] = fit(measured)
    return models


def report(results: dict[str, Any]) -> None:
    rows = combined(results)
    models = fits(results)
    print(f"\n{results['date']}, commit {results['commit']}, {results['cores']} cores, "
          f"load {results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after")
    print(f"ResNet-32 train step here (batch 64, one process): {results['step']['resnet32_batch64_cpu_s'] * 1000:.0f} ms")
    print("\nlinks (one TCP flow hosta -> hostb):")
    for link, probe in results["probe"].items():
        extra = f", round trip {probe['rtt_us_median']:.0f} µs (min {probe['rtt_us_min']:.0f})" if "rtt_us_median" in probe else ""
        print(f"  {link}: {probe.get('received_gbit_s', probe['sent_gbit_s']):.2f} Gbit/s{extra}")
    print("\n| link | backend | ranks | tensor set | fp16 | fusion | measured ms (min–max) | model ms | error | limited by |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors: dict[str, list[float]] = defaultdict(list)
    by_backend: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        model = models[row["backend"]]
        exchange = exchange_of(row, results["shapes"], results["cores"], row["median_s"])
        error = model.relative_error(exchange)
        errors[row["link"]].append(error)
        by_backend[(row["link"], row["backend"])].append(error)
        terms = model.terms(exchange)
        limit = ["latency", "link", "CPU", "fp16 casts", "overhead"][max(range(5), key=lambda i: terms[i])]
        print(f"| {row['link']} | {row['backend']} | {row['ranks']} | {row['set']} | {'yes' if row['fp16'] else 'no'} | "
              f"{row['fusion']} | {row['median_s'] * 1000:.1f} ({row['min_s'] * 1000:.1f}–{row['max_s'] * 1000:.1f}) | "
              f"{model.seconds(exchange) * 1000:.1f} | {error * 100:+.0f} % | {limit} |")
    print("\n| backend | a (per ring step and buffer) | η (share of the link) | C (bytes/s a rank reduces) | c16 (fp16) | t0 (per exchange) |")
    print("|---|---|---|---|---|---|")
    for backend, model in models.items():
        print(f"| {backend} | {model.latency_s * 1e6:.0f} µs | {model.link_efficiency:.2f} | "
              f"{model.cpu_bytes_per_s / 1e9:.2f} GB/s | {model.fp16_cast_s_per_byte * 1e9:.2f} ns per float32 byte | "
              f"{model.overhead_s * 1000:.1f} ms |")
        print(f"<!-- {backend}: {model!r} -->")
    backends = list(models)
    print("\nmedian |error| (cells within 20 %), per link setting and backend:")
    print(f"| link | all | {' | '.join(backends)} |")
    print("|---" * (len(backends) + 2) + "|")
    for link, found in errors.items():
        cells = [found] + [by_backend[(link, backend)] for backend in backends]
        print(f"| {link} | " + " | ".join(_quality(cell) for cell in cells) + " |")
    projection(results, models)


# (fp16 compression, ranks per node reduced inside the node first, the per-step latency a instead of
# the fitted one: 20 µs stands for NCCL over RDMA, not measured here)
KNOBS = ((False, 1, None), (True, 1, None), (False, 4, None), (False, 8, None), (False, 4, 20e-6), (False, 8, 20e-6))


def _exchange_s(model: RingModel, nodes: int, sizes: list[int], wire: list[int], link: str, fp16: bool) -> float:
    """The ring across `nodes` (a hierarchical all-reduce's inter-node part; inside a node is not modelled)."""
    if nodes < 2:
        return 0.0
    return model.seconds(Exchange(nodes, sum(sizes), buffers(wire, HOROVOD_FUSION_BYTES), link_bits_per_s(link), fp16))


def _quality(errors: list[float]) -> str:
    within = sum(abs(e) <= 0.2 for e in errors)
    return f"{statistics.median(abs(e) for e in errors) * 100:.0f} % ({within} of {len(errors)})"


def projection(results: dict[str, Any], models: dict[str, RingModel]) -> None:
    """Efficiency at 8, 64 and 512 ranks: a rank per machine, each its own cores (s = 1)."""
    base = models.get("gloo") or next(iter(models.values()))
    shapes = results["shapes"]
    here = results["step"]["resnet32_batch64_cpu_s"]
    scenarios = [{"network": "ResNet-32 (cifar10.yaml)", "set": "resnet32", "where": "CPU rank, batch 64, measured here",
                  "step_s": here, "source": "measured", "links": ["1gbit", "10gbit"], "cpu": True},
                 {"network": "ResNet-20 (quickstart.yaml)", "set": "pipeline:quickstart.yaml",
                  "where": "CPU rank, batch 64, ≈ 0.6 × ResNet-32's step (depth 20/32)",
                  "step_s": here * 20 / 32, "source": "derived", "links": ["1gbit", "10gbit"], "cpu": True},
                 *PROJECTIONS]
    print("\nprojection with the gloo fit (a, η, t0; C and c16 only for CPU ranks), fusion on (64 MiB buffers), one rank "
          "per GPU or machine; efficiency without overlap → with the whole exchange under the backward pass (2/3 of the step):")
    print("| network | a rank's step | link | knobs | exchange ms at 8 / 64 / 512 ranks | efficiency at 8 | at 64 | at 512 |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in scenarios:
        if scenario["set"] not in shapes:
            continue
        model = base if scenario["cpu"] else RingModel(base.latency_s, base.inverse_efficiency, overhead_s=base.overhead_s)
        sizes = shapes[scenario["set"]]["tensor_bytes"]
        for link in scenario["links"]:
            for fp16, per_node, latency in KNOBS:
                wire = [s // 2 for s in sizes] if fp16 else sizes
                knob_model = model if latency is None else dataclasses.replace(model, latency_s=latency)
                times = [_exchange_s(knob_model, n // per_node, sizes, wire, link, fp16) for n in (8, 64, 512)]
                effs = [f"{efficiency(scenario['step_s'], t) * 100:.0f} → {efficiency(scenario['step_s'], t, 1.0) * 100:.0f} %"
                        for t in times]
                knobs = "fp16" if fp16 else "fp32"
                knobs += f", hierarchical ({per_node} per node)" if per_node > 1 else ", flat ring"
                knobs += f", a = {latency * 1e6:.0f} µs" if latency is not None else ""
                print(f"| {scenario['network']} | {scenario['where']} ({scenario['step_s'] * 1000:.0f} ms) | {link} | "
                      f"{knobs} | {' / '.join(f'{t * 1000:.1f}' for t in times)} | {' | '.join(effs)} |")


if __name__ == "__main__":
    main()
