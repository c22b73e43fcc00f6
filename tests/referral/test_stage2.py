"""Stage II on toys with known client densities: the fitted potentials recover the log density ratios.

These pin the full-batch Adam option (``Stage2Optim("adam")``); the default mini-batch SGD is tested in
test_stage2_sgd.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lightning_fed.algorithms.edgedrm.stage2 import Stage2Optim, fit_stage2
from lightning_fed.graphs.topology import Graph

MEANS = torch.tensor([[0.0, 0.0], [1.0, 0.5], [-0.5, 1.5]])


def ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y.long(), reduction="none")


def gaussian_clients(sizes: list[int], seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    z = [MEANS[u] + torch.randn(n, 2, generator=gen) for u, n in enumerate(sizes)]
    y = [(zz[:, 0] > 0).float() for zz in z]
    return z, y


def test_potential_differences_recover_log_density_ratios() -> None:
    """Client u draws z ~ N(mu_u, I), so log phi_j(z)/phi_i(z) = (mu_j - mu_i)^T z - (|mu_j|^2 - |mu_i|^2)/2:
    the true slope difference is mu_j - mu_i and the intercept difference -(|mu_j|^2 - |mu_i|^2)/2, for
    every pair, including 0 and 2, which share no edge on the path 0 - 1 - 2 (coherent potentials). The
    clients' sizes differ 4:1; the balanced endpoint loss must not absorb that into b (no prior)."""
    z, y = gaussian_clients([4000, 1000, 2000])
    path = Graph(3, torch.tensor([[0, 1], [1, 2]]))
    adam = Stage2Optim("adam", lr=0.05, rounds=200)
    fit = fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), path.adjacency, 0.5, ce, adam)
    b, theta = fit.potentials.b, fit.potentials.theta
    sq = (MEANS**2).sum(1) / 2
    for i, j in [(0, 1), (1, 2), (0, 2)]:
        torch.testing.assert_close(theta[j] - theta[i], MEANS[j] - MEANS[i], atol=0.12, rtol=0)
        assert float(b[j] - b[i]) == pytest.approx(float(-(sq[j] - sq[i])), abs=0.12)
    assert fit.potentials.counts.tolist() == [4000, 1000, 2000]


def test_initial_objective_and_lambda_one() -> None:
    """At zero potentials every endpoint loss is log 2, so L_G = lambda mean_u T_u + (1 - lambda) log 2;
    with zero heads and K = 2 classes T_u = log 2 too. With lambda = 1 the potentials never move."""
    z, y = gaussian_clients([50, 30, 40])
    cycle = Graph(3, torch.tensor([[0, 1], [0, 2], [1, 2]]))
    seen = []
    adam = Stage2Optim("adam", lr=0.01, rounds=3)
    fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), cycle.adjacency, 0.3, ce, adam, log=seen.append)
    assert len(seen) == 3
    assert seen[0]["stage2_loss"] == pytest.approx(math.log(2.0), rel=1e-6)
    assert seen[0]["stage2_route"] == pytest.approx(2 * math.log(2.0), rel=1e-6)  # degree 2
    assert seen[-1]["stage2_loss"] < seen[0]["stage2_loss"]
    for optim in (Stage2Optim("adam", lr=0.01, rounds=5), Stage2Optim(rounds=5)):
        frozen = fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), cycle.adjacency, 1.0, ce, optim)
        assert float(frozen.potentials.theta.abs().max()) == 0.0
        assert float(frozen.potentials.b.abs().max()) == 0.0
        assert float(frozen.weight.abs().max()) > 0.0


def test_stage2_rejects_bad_config() -> None:
    z, y = gaussian_clients([10, 10, 10])
    adj = Graph(3, torch.tensor([[0, 1], [1, 2]])).adjacency
    with pytest.raises(ValueError, match="stage2_epochs"):
        fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), adj, 0.5, ce, Stage2Optim("adam", rounds=0))
    with pytest.raises(ValueError, match="lam"):
        fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), adj, -0.1, ce)
    with pytest.raises(ValueError, match="at least one training row"):
        fit_stage2([z[0], z[1], z[2][:0]], y, torch.zeros(3, 2, 2), torch.zeros(3, 2), adj, 0.5, ce)
