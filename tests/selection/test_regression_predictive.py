"""PairRegression.predictive against the conjugate closed form (issue 30, the model posterior).

Intercept-only model (no descriptors, no attributes), pooled: with prior ``w ~ N(m0, s0^2)`` and
``n`` credits ``y_k`` of noise ``sigma^2`` (the least-squares residual variance
``sum (y - ybar)^2 / (n - 1)``), the posterior is ``N((m0/s0^2 + sum y/sigma^2) / p, 1/p)`` with
``p = 1/s0^2 + n/sigma^2``; without the residual every pair's predictive is that posterior. With the
residual, an observed pair's mean adds its shrunk residual ``e n / (n + sigma^2/tau^2)`` and its
variance ``(1/tau^2 + n/sigma^2)^{-1}`` replaces the stranger's ``tau^2``.
"""

from __future__ import annotations

import pytest
import torch

from lightning_fed.selection.abps import BetaPosterior, PairRegression


def _fit(residual: bool):
    reg = PairRegression(attributes=[], metadata_dim=0, residual=residual)
    reg.bind(torch.zeros(3, 0), None)
    post = BetaPosterior(3, 1.0, 1.0)
    i, j = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]), torch.tensor([1, 1, 1, 2, 2, 2, 0, 0])
    y = torch.tensor([0.2, 0.22, 0.18, 0.8, 0.78, 0.82, 0.5, 0.52], dtype=torch.float64)
    post.update(i, j, y)
    reg.observe(i, j, y, 3)
    return reg, post, y


def test_intercept_only_predictive_is_the_conjugate_posterior() -> None:
    reg, post, y = _fit(residual=False)
    s2 = float(((y - y.mean()) ** 2).sum() / (len(y) - 1))
    p = 1 / 0.1**2 + len(y) / s2
    mean, var = reg.predictive(post)
    assert torch.allclose(
        mean, torch.full((3, 3), (0.5 / 0.1**2 + float(y.sum()) / s2) / p, dtype=torch.float64)
    )
    assert torch.allclose(var, torch.full((3, 3), 1 / p, dtype=torch.float64))


def test_the_residual_moves_observed_pairs_and_widens_strangers() -> None:
    reg, post, y = _fit(residual=True)
    s2 = float(((y - y.mean()) ** 2).sum() / (len(y) - 1))
    p = 1 / 0.1**2 + len(y) / s2
    w = (0.5 / 0.1**2 + float(y.sum()) / s2) / p
    pairs = {(0, 1): (3, 0.2), (1, 2): (3, 0.8), (2, 0): (2, 0.51)}  # (n, mean credit)
    e = {k: m - w for k, (n, m) in pairs.items()}
    tau2 = max(0.0, sum(e[k] ** 2 - s2 / n for k, (n, _) in pairs.items()) / len(pairs))
    assert tau2 > 0
    mean, var = reg.predictive(post)
    for (a, b), (n, _) in pairs.items():
        assert float(mean[a, b]) == pytest.approx(w + e[(a, b)] * n / (n + s2 / tau2))
        assert float(var[a, b]) == pytest.approx(1 / p + 1 / (1 / tau2 + n / s2))
    assert float(mean[1, 0]) == pytest.approx(w)  # a stranger: the model's prediction
    assert float(var[1, 0]) == pytest.approx(1 / p + tau2)
