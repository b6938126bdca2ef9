"""`dslrun validate --world-size N --link RATE`: what the gradient exchange will cost before launching.

The pipeline's network is built (as `--build` builds it), its trainable variables counted, and
the ring all-reduce model fitted on the emulated links (dsl/distributed/ring_allreduce.py,
docs/benchmarks.md "Cost of scale") gives the exchange's time per step at N ranks, one per
machine, fused into 64 MiB buffers, in float32 and with fp16 compression; with `--step-time`,
the scaling efficiency, without and with overlap of the exchange and the backward pass.
A backend that updates asynchronously (a parameter-server cluster) exchanges no all-reduce:
the plan says so instead.
"""

from __future__ import annotations

from typing import Any

from dsl.distributed.ring_allreduce import (
    FITTED,
    FITTED_ON,
    HOROVOD_FUSION_BYTES,
    Exchange,
    buffers,
    efficiency,
    link_bits_per_s,
)


def gradient_sizes(model: Any) -> list[int]:
    """Bytes of each trainable variable's gradient (the variable's dtype: float32 under mixed precision too)."""
    return [int(v.shape.num_elements()) * v.dtype.size for v in model.trainable_variables]


def exchange_plan(sizes: list[int], world_size: int, link: str, step_time: float | None,
                  asynchronous: bool) -> tuple[str, dict[str, Any]]:
    """One summary line and its details (validate's JSON) for gradients of `sizes` bytes."""
    total = sum(sizes)
    head = f"gradients {total / 1e6:.2f} MB per step in {len(sizes)} tensors"
    if asynchronous:
        return (f"{head}; each worker's update goes to the parameter servers on its own, so no all-reduce "
                "(the ring model does not apply)", {"gradient_bytes": total, "tensors": len(sizes), "asynchronous": True})
    bits = link_bits_per_s(link)
    details: dict[str, Any] = {"gradient_bytes": total, "tensors": len(sizes), "world_size": world_size,
                               "link_bits_per_s": bits, "model": FITTED_ON}
    seconds = {}
    for fp16 in (False, True):
        wire = [size // 2 for size in sizes] if fp16 else sizes
        exchange = Exchange(world_size, total, buffers(wire, HOROVOD_FUSION_BYTES), bits, fp16)
        seconds["fp16" if fp16 else "float32"] = FITTED.seconds(exchange) if world_size > 1 else 0.0
    details["exchange_s"] = seconds
    text = (f"{head}; the ring all-reduce at {world_size} ranks on {link}: {seconds['float32'] * 1000:.1f} ms per step "
            f"({seconds['fp16'] * 1000:.1f} ms with fp16 compression)")
    if step_time is not None:
        plain = efficiency(step_time, seconds["float32"])
        hidden = efficiency(step_time, seconds["float32"], overlap=1.0)
        details["efficiency"] = {"step_s": step_time, "no_overlap": plain, "overlap": hidden}
        text += (f"; scaling efficiency at a {step_time * 1000:.0f} ms step: {plain * 100:.0f} % "
                 f"({hidden * 100:.0f} % if the exchange overlaps the backward pass)")
    return text + f" [model: {FITTED_ON}]", details
