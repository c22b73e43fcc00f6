"""DeLong (1988) AUROC variance: the brute-force formula, and 95 % coverage on simulated centers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_fed.metrics import batched_auroc
from lightning_fed.metrics.delong import delong_interval, delong_variance


def _brute(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    x, z = scores[y == 1], scores[y == 0]
    psi = (x[:, None] > z[None]) + 0.5 * (x[:, None] == z[None])
    v10, v01 = psi.mean(1), psi.mean(0)
    return float(psi.mean()), float(v10.var(ddof=1) / len(x) + v01.var(ddof=1) / len(z))


def test_matches_the_pairwise_formula_with_ties_and_padding() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for n in (7, 12, 30):
        y = np.r_[np.ones(3), np.zeros(n - 3)]
        rows.append((np.round(rng.normal(size=n) + y, 1), y))  # rounding makes ties
    n_max = max(len(y) for _, y in rows)
    s = torch.zeros(len(rows), n_max, dtype=torch.float64)
    t = torch.zeros(len(rows), n_max)
    mask = torch.zeros(len(rows), n_max, dtype=torch.bool)
    for c, (sc, y) in enumerate(rows):
        s[c, : len(y)], t[c, : len(y)], mask[c, : len(y)] = torch.from_numpy(sc), torch.from_numpy(y), True
    auroc, var = delong_variance(s, t, mask)
    torch.testing.assert_close(auroc, batched_auroc(s, t, mask))
    for c, (sc, y) in enumerate(rows):
        a, v = _brute(sc, y)
        assert auroc[c].item() == pytest.approx(a, abs=1e-12)
        assert var[c].item() == pytest.approx(v, abs=1e-12)


def test_one_case_of_a_class_has_no_interval() -> None:
    s = torch.tensor([[0.9, 0.1, 0.2, 0.3], [0.9, 0.8, 0.2, 0.3], [0.1, 0.2, 0.3, 0.4]])
    t = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    auroc, low, high = delong_interval(s, t)
    assert auroc[0] == 1.0 and math.isnan(low[0]) and math.isnan(high[0])
    assert auroc[1] == 1.0 and low[1] == 1.0 and high[1] == 1.0  # perfect separation: zero variance
    assert math.isnan(auroc[2]) and math.isnan(low[2])


def test_coverage_on_a_simulated_center_is_95_percent() -> None:
    """Binormal center, P = 40 positives ~ N(d, 1), N = 160 negatives ~ N(0, 1): the true AUROC is
    Phi(d / sqrt 2) = 0.80; 1,000 seeded replications in one batched call."""
    d = math.sqrt(2.0) * 0.8416212335729143  # Phi^-1(0.8) * sqrt(2)
    truth = 0.8
    gen = torch.Generator().manual_seed(2029)
    reps, p, n = 1000, 40, 160
    y = torch.cat([torch.ones(reps, p), torch.zeros(reps, n)], dim=1)
    scores = torch.randn(reps, p + n, generator=gen, dtype=torch.float64) + d * y
    auroc, low, high = delong_interval(scores, y)
    coverage = float(((low <= truth) & (truth <= high)).double().mean())
    assert 0.93 <= coverage <= 0.97, coverage
    assert abs(float(auroc.mean()) - truth) < 0.01
