"""The FLOP count and matmul throughput that benchmarks/engine.py measures the packed engine against."""

from __future__ import annotations

import math

from benchmarks.engine import matmul_throughput, round_flop


def test_round_flop_is_six_flop_per_weight_and_row() -> None:
    """MortalityMLP 60 -> 128 -> 64 -> 1: P = 15,936 weights in matmuls; the strict count drops the
    first layer's input gradient (2 FLOP per first-layer weight and row)."""
    rows = 2 * 56_800
    flop, strict = round_flop([60, 128, 64, 1], rows)
    assert flop == 6 * (60 * 128 + 128 * 64 + 64) * rows
    assert strict == flop - 2 * 60 * 128 * rows
    assert 1.08e10 < flop < 1.09e10


def test_matmul_throughput_reports_both_rates() -> None:
    rates = matmul_throughput([6, 8, 4, 1], centers=3, batch=16, repeats=1, side=32)
    assert set(rates) == {"bmm", "sgemm", "bmm_cpu"}
    assert all(math.isfinite(v) and v > 0 for v in rates.values())
