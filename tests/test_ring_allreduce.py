"""The ring all-reduce cost model (dsl/distributed/ring_allreduce.py): its terms, its fit, the efficiency."""

from __future__ import annotations

import pytest

from dsl.distributed.ring_allreduce import Exchange, RingModel, buffers, efficiency, fit, link_bits_per_s


def test_link_rates_read_as_tc_writes_them() -> None:
    assert link_bits_per_s("2.5gbit") == 2.5e9
    assert link_bits_per_s("100mbit") == 1e8
    assert link_bits_per_s("10Gbit") == 1e10
    with pytest.raises(ValueError, match=r"e\.g\. 10gbit"):
        link_bits_per_s("fast")


def test_buffers_pack_tensors_in_order_up_to_the_threshold() -> None:
    assert buffers([10, 20, 30], None) == 3
    assert buffers([10, 20, 30], 0) == 3
    assert buffers([10, 20, 30], 35) == 2  # [10, 20] [30]
    assert buffers([100, 10, 10], 50) == 2  # a tensor above the threshold goes alone: [100] [10, 10]
    assert buffers([10, 20, 30], 1000) == 1


def test_the_terms_of_one_exchange() -> None:
    exchange = Exchange(ranks=4, float32_bytes=1_000_000, buffers=3, link_bits_per_s=1e9, ranks_per_core=2.0)
    steps, link, cpu, casts, overhead = exchange.features()
    assert steps == 18  # (n - 1) · k · s: two ranks per core wait for it at every step
    assert link == pytest.approx(2 * 3 / 4 * 1e6 * 8 / 1e9)  # 12 ms on the wire at 1 Gbit/s
    assert cpu == pytest.approx(1.5e6 * 2)  # ring bytes times the ranks sharing a core
    assert casts == 0.0 and overhead == 2.0
    half = Exchange(4, 1_000_000, 3, 1e9, fp16=True).features()
    assert half[1] == pytest.approx(link / 2) and half[3] == 1_000_000


def test_the_model_adds_its_terms() -> None:
    model = RingModel(latency_s=1e-4, inverse_efficiency=1.25)
    exchange = Exchange(ranks=2, float32_bytes=125_000_000, buffers=2, link_bits_per_s=1e9, seconds=1.5)
    # 1e-4 · 1 · 2 + 1.25 · (2 · 1/2 · 125 MB · 8 / 1 Gbit/s = 1 s)
    assert model.seconds(exchange) == pytest.approx(1.2502)
    assert model.relative_error(exchange) == pytest.approx(1.2502 / 1.5 - 1)
    assert model.link_efficiency == pytest.approx(0.8)


def test_fit_recovers_the_parameters_that_made_the_data() -> None:
    truth = RingModel(latency_s=2e-4, inverse_efficiency=1.25, inverse_cpu_bytes_per_s=1 / 2e9,
                      fp16_cast_s_per_byte=0.5e-9, overhead_s=3e-3)
    grid = [Exchange(n, size, k, link, fp16, n / 2) for n in (2, 4, 8) for size in (2_000_000, 100_000_000)
            for k in (1, 100) for link in (1e9, 1e10) for fp16 in (False, True)]
    measured = [Exchange(e.ranks, e.float32_bytes, e.buffers, e.link_bits_per_s, e.fp16, e.ranks_per_core,
                         truth.seconds(e)) for e in grid]
    found = fit(measured)
    assert found.latency_s == pytest.approx(2e-4, rel=1e-6)
    assert found.link_efficiency == pytest.approx(0.8, rel=1e-6)
    assert found.cpu_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert found.fp16_cast_s_per_byte == pytest.approx(0.5e-9, rel=1e-6)
    assert found.overhead_s == pytest.approx(3e-3, rel=1e-6)


def test_fit_keeps_every_parameter_non_negative() -> None:
    # Pure bandwidth at 90 % of the link, and a little noise that a negative latency would absorb.
    measured = [Exchange(n, 10_000_000, 1, 1e9, seconds=2 * (n - 1) / n * 8e7 / 0.9e9 * (0.99 if n == 8 else 1.0))
                for n in (2, 4, 8)]
    found = fit(measured, free=("latency_s", "inverse_efficiency"))
    assert found.latency_s >= 0 and found.inverse_cpu_bytes_per_s == 0
    assert found.link_efficiency == pytest.approx(0.9, rel=0.02)
    # Faster than the link (a token bucket's burst): η stays at 1, the latency takes nothing back.
    faster = [Exchange(n, 10_000_000, 1, 1e9, seconds=2 * (n - 1) / n * 8e7 / 1.2e9) for n in (2, 4, 8)]
    assert fit(faster, free=("latency_s", "inverse_efficiency")) == RingModel(0.0, 1.0)
    assert fit(faster, free=("inverse_efficiency",), floors={}).link_efficiency == pytest.approx(1.2)
    with pytest.raises(ValueError, match="at least one"):
        fit([])


def test_efficiency_hides_the_exchange_under_the_backward_pass() -> None:
    assert efficiency(0.2, 0.1) == pytest.approx(0.2 / 0.3)
    assert efficiency(0.2, 0.1, overlap=1.0) == 1.0  # 0.1 s fits under 2/3 of 0.2 s
    assert efficiency(0.2, 0.3, overlap=1.0) == pytest.approx(0.2 / (0.2 + 0.3 - 0.4 / 3))
