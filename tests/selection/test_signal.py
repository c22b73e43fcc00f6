"""The credit signal-to-noise diagnostic (benchmarks/abps_signal.py) on a 3-center hand computation."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

_SPEC = importlib.util.spec_from_file_location(
    "abps_signal", Path(__file__).resolve().parents[2] / "benchmarks" / "abps_signal.py"
)
abps_signal = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(abps_signal)


def test_signal_to_noise_by_hand() -> None:
    """Groups (0, 0, 1). Pair (0, 1), same unit: credits 0.6, 0.8 (sum 1.4, sumsq 1.0); pair (0, 2),
    cross: 0.4, 0.4 (sum 0.8, sumsq 0.32); pair (2, 1), cross: 0.5 (one observation).
    Within-pair SS: (0.6-0.7)^2 + (0.8-0.7)^2 + 0 + 0 + 0 = 0.02 on 5 - 3 = 2 dof, sigma_w = 0.1.
    Same mean 1.4 / 2 = 0.7, cross mean (0.8 + 0.5) / 3 = 0.43333, delta = 0.26667,
    n_needed = (2 * 0.1 / 0.26667)^2 = 0.5625."""
    total = torch.zeros(3, 3, dtype=torch.float64)
    sumsq, count = torch.zeros_like(total), torch.zeros_like(total)
    for (i, j), xs in {(0, 1): [0.6, 0.8], (0, 2): [0.4, 0.4], (2, 1): [0.5]}.items():
        total[i, j], sumsq[i, j], count[i, j] = sum(xs), sum(x * x for x in xs), len(xs)
    r = abps_signal.signal_to_noise(total, sumsq, count, torch.tensor([0, 0, 1]))
    assert r["sigma_w"] == pytest.approx(0.1)
    assert r["mean_same"] == pytest.approx(0.7) and r["mean_cross"] == pytest.approx(1.3 / 3)
    assert r["n_needed"] == pytest.approx((0.2 / (0.7 - 1.3 / 3)) ** 2)
    assert r["n_max"] == 2 and r["observations"] == 5 and r["pairs"] == 3
    assert math.isclose(r["n_per_pair"], 5 / 3)
