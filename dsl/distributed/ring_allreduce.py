"""The ring all-reduce cost model: what a gradient exchange costs at N ranks on a given link.

    t = a·(n−1)·k·s + 2(n−1)/n · B · (8 / (η·L) + s / C) + c16 · B32 · s + t0 · s

n ranks, k buffers sent one after another (the tensors, or the fused buffers), B bytes on
the wire (half of B32, the float32 bytes, with fp16 compression), L the link's bit/s, and s
the ranks per core, max(1, n / cores): 1 when every rank has cores of its own (a cluster,
and every projection), up to 4 on the bench's 2 cores, where each step of the ring, each
reduction and each cast waits for a core. Fitted (bench/scaling.py, docs/benchmarks.md
"Cost of scale"): `a`, the cost of one step of the ring for one buffer (for Horovod mostly
its coordination, not the wire); `η`, the share of the link's rate the exchange gets; `C`,
the bytes per second a rank's CPU reduces and copies; `c16`, the seconds per float32 byte
of fp16's two casts (and, under Horovod on CPUs, its float16 sums); `t0`, what one exchange
costs whatever its size (Horovod's negotiation, a call into the graph). Every term is linear in 1/η, 1/C, a, c16 and t0, so the fit is a non-negative least squares on the relative error, solved exactly over the
(few) subsets of parameters. Pure Python: `dslrun validate` uses it without TensorFlow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

PARAMETERS = ("latency_s", "inverse_efficiency", "inverse_cpu_bytes_per_s", "fp16_cast_s_per_byte", "overhead_s")
HOROVOD_FUSION_BYTES = 64 * 1024 * 1024  # HOROVOD_FUSION_THRESHOLD's default
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}


def link_bits_per_s(rate: str) -> float:
    """"10gbit" -> 1e10; tc's spelling of a rate (kbit, mbit, gbit)."""
    text = rate.strip().lower()
    for unit, scale in _UNITS.items():
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * scale
            except ValueError:
                break
    raise ValueError(f"link {rate!r}: expected a number and kbit, mbit or gbit, e.g. 10gbit or 2.5gbit")


def buffers(tensor_bytes: Sequence[int], fusion_bytes: int | None) -> int:
    """How many buffers the exchange sends: one per tensor without fusion (None or 0), else
    the tensors packed in order into buffers of at most `fusion_bytes` (a larger tensor alone)."""
    if not fusion_bytes:
        return len(tensor_bytes)
    count, filled = 0, 0
    for size in tensor_bytes:
        if count == 0 or filled + size > fusion_bytes:
            count, filled = count + 1, 0
        filled += size
    return count


@dataclass(frozen=True)
class Exchange:
    """One measured (or asked-for) exchange: its shape and, when measured, its seconds."""

    ranks: int
    float32_bytes: int
    buffers: int
    link_bits_per_s: float
    fp16: bool = False
    ranks_per_core: float = 1.0
    seconds: float = 0.0

    def features(self) -> tuple[float, float, float, float, float]:
        """The model's terms for unit parameters: t = Σ parameter · feature."""
        n = self.ranks
        wire = self.float32_bytes / 2 if self.fp16 else self.float32_bytes
        share = max(1.0, self.ranks_per_core)
        ring = 2 * (n - 1) / n * wire
        return ((n - 1) * self.buffers * share, ring * 8 / self.link_bits_per_s, ring * share,
                self.float32_bytes * share if self.fp16 else 0.0, share)


@dataclass(frozen=True)
class RingModel:
    """The fitted parameters (see the module's docstring)."""

    latency_s: float
    inverse_efficiency: float  # 1/η: 1.25 means the exchange gets 80 % of the link
    inverse_cpu_bytes_per_s: float = 0.0
    fp16_cast_s_per_byte: float = 0.0
    overhead_s: float = 0.0

    @property
    def link_efficiency(self) -> float:
        return 1 / self.inverse_efficiency if self.inverse_efficiency else math.inf

    @property
    def cpu_bytes_per_s(self) -> float:
        return 1 / self.inverse_cpu_bytes_per_s if self.inverse_cpu_bytes_per_s else math.inf

    def seconds(self, exchange: Exchange) -> float:
        return sum(self.terms(exchange))

    def terms(self, exchange: Exchange) -> list[float]:
        """The seconds of each term, in the order of PARAMETERS."""
        values = (self.latency_s, self.inverse_efficiency, self.inverse_cpu_bytes_per_s, self.fp16_cast_s_per_byte,
                  self.overhead_s)
        return [p * f for p, f in zip(values, exchange.features(), strict=True)]

    def relative_error(self, exchange: Exchange) -> float:
        """(model − measured) / measured."""
        return (self.seconds(exchange) - exchange.seconds) / exchange.seconds


LINK_CEILING = {"inverse_efficiency": 1.0}  # no exchange gets more than its link's rate (η ≤ 1)


def fit(measured: Sequence[Exchange], free: Sequence[str] = PARAMETERS,
        floors: dict[str, float] | None = None) -> RingModel:
    """The parameters (among `free`; the others stay 0) with the least squared relative error,
    each at least its floor (0, or `floors`, by default 1/η ≥ 1: what a link carries beyond its
    rate is CPU time saved elsewhere, which the C term is for)."""
    if not measured:
        raise ValueError("fit needs at least one measured exchange")
    floor = [(LINK_CEILING if floors is None else floors).get(name, 0.0) for name in PARAMETERS]
    rows = [[f / m.seconds for f in m.features()] for m in measured]  # relative error: divide by the measurement
    target = [1.0 - sum(b * r for b, r in zip(floor, row, strict=True)) for row in rows]
    indices = [PARAMETERS.index(name) for name in free]
    best: tuple[float, list[float]] | None = None
    for size in range(len(indices) + 1):
        for subset in itertools.combinations(indices, size):
            solution = _least_squares([[row[i] for i in subset] for row in rows], target) if subset else []
            if solution is None or min(solution, default=0.0) < 0:
                continue
            values = list(floor)
            for i, value in zip(subset, solution, strict=True):
                values[i] += value
            residual = sum((sum(v * r for v, r in zip(values, row, strict=True)) - 1) ** 2 for row in rows)
            if best is None or residual < best[0] - 1e-15:
                best = (residual, values)
    if best is None or not any(best[1]):
        raise ValueError("no non-negative fit: the measurements do not grow with the bytes or the ranks")
    return RingModel(*best[1])


def _least_squares(matrix: list[list[float]], target: list[float]) -> list[float] | None:
    """argmin |Ax − b|² through the normal equations (a handful of columns); None if singular.

    The columns are scaled to unit norm first: seconds per byte and seconds per step differ by
    six orders of magnitude, which the normal equations would square."""
    columns = len(matrix[0])
    norms = [math.sqrt(sum(row[i] ** 2 for row in matrix)) or 1.0 for i in range(columns)]
    scaled = [[row[i] / norms[i] for i in range(columns)] for row in matrix]
    normal = [[sum(row[i] * row[j] for row in scaled) for j in range(columns)] for i in range(columns)]
    right = [sum(row[i] * b for row, b in zip(scaled, target, strict=True)) for i in range(columns)]
    solution = _solve(normal, right)
    return None if solution is None else [x / norm for x, norm in zip(solution, norms, strict=True)]


def _solve(matrix: list[list[float]], right: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting on a copy; None when (nearly) singular."""
    size = len(right)
    a = [row[:] + [value] for row, value in zip(matrix, right, strict=True)]
    scale = max(abs(v) for row in matrix for v in row) or 1.0
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(size):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][size] / a[i][i] for i in range(size)]


def efficiency(step_s: float, exchange_s: float, overlap: float = 0.0, backward_share: float = 2 / 3) -> float:
    """Scaling efficiency of a synchronous step: compute / (compute + the exchange not hidden).

    With `overlap` (0 to 1) the exchange runs under that share of the backward pass
    (`backward_share` of the step, about two thirds for a convolutional network), as
    Horovod's and TF's all-reduces of the gradients ready first do.
    """
    hidden = overlap * backward_share * step_s
    return step_s / (step_s + max(0.0, exchange_s - hidden))


# What `dslrun validate --link` uses: `make bench-scaling`'s fit for Horovod over Gloo (docs/benchmarks.md,
# "Cost of scale: clusters past one machine"). CPU ranks, one per machine (s = 1): on GPUs, where the
# reduction and the casts run on the device, its C and fp16 terms overstate the exchange a little.
# Fitted on 2026-11-28 (72 cells: 2-8 ranks, 1/2.5/10 Gbit/s, ResNet-32 and ResNet-50, fp16 and fusion on/off).
FITTED = RingModel(latency_s=686e-6, inverse_efficiency=1.0, inverse_cpu_bytes_per_s=1 / 2.05e9,
                   fp16_cast_s_per_byte=3.44e-9, overhead_s=5.1e-3)
FITTED_ON = "ring model fitted to Horovod/Gloo on emulated links, docs/benchmarks.md"
