"""Balanced endpoint loss, kappa and incident scores against 3-client hand computations (App. B.4)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.algorithms.edgedrm.potentials import Potentials, endpoint_losses, kappa, neighbour_table
from lightning_fed.algorithms.edgedrm.stage2 import pad_rows
from lightning_fed.graphs.topology import Graph


def sp(v: float) -> float:
    return math.log1p(math.exp(v))


# Path 0 - 1 - 2, d = 1: rows z0 = {0, 1}, z1 = {2}, z2 = {-1, 1}; b = (0, .5, -.5), theta = (0, 1, 2).
PATH = Graph(3, torch.tensor([[0, 1], [1, 2]]))
Z = [torch.tensor([[0.0], [1.0]]), torch.tensor([[2.0]]), torch.tensor([[-1.0], [1.0]])]
B = torch.tensor([0.0, 0.5, -0.5], dtype=torch.float64)
THETA = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)


def test_kappa_three_clients() -> None:
    """kappa = m (1 - lambda) / (2|E|): m = 3, |E| = 2, lambda = 0.5 -> 3 * 0.5 / 4 = 0.375."""
    assert kappa(3, 2, 0.5) == pytest.approx(0.375)
    assert kappa(3, 3, 0.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="lam"):
        kappa(3, 2, 1.5)
    with pytest.raises(ValueError, match="edges"):
        kappa(3, 0, 0.5)


def test_neighbour_table_path() -> None:
    nbr, valid = neighbour_table(PATH.adjacency)
    assert nbr.tolist() == [[1, 0], [0, 2], [1, 2]]
    assert valid.tolist() == [[True, False], [True, True], [True, False]]


def test_endpoint_losses_match_hand_computation() -> None:
    """L_uv^(u) = mean_r softplus((b_v - b_u) + (theta_v - theta_u) z_ur) on u's own rows:

    L_01^(0) = (sp(0.5 + 0) + sp(0.5 + 1)) / 2     (b1 - b0 = 0.5, theta1 - theta0 = 1)
    L_10^(1) = sp(-0.5 - 1 * 2)                     (b0 - b1 = -0.5, theta0 - theta1 = -1, z = 2)
    L_12^(1) = sp(-1 + 1 * 2)                       (b2 - b1 = -1, theta2 - theta1 = 1)
    L_21^(2) = (sp(1 - (-1)) + sp(1 - 1)) / 2       (b1 - b2 = 1, theta1 - theta2 = -1)
    """
    z, mask = pad_rows([t.double() for t in Z])
    nbr, valid = neighbour_table(PATH.adjacency)
    got = endpoint_losses(z, mask, B, THETA, nbr, valid)
    l01, l10 = (sp(0.5) + sp(1.5)) / 2, sp(-2.5)
    l12, l21 = sp(1.0), (sp(2.0) + sp(0.0)) / 2
    want = torch.tensor([[l01, 0.0], [l10, l12], [l21, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want)
    # Regrouped by client with kappa it is the edge-wise graph objective (lambda = 0.5, |E| = 2):
    # (1/m) sum_u kappa sum_v L_uv^(u) == (1 - lambda) / (2|E|) sum_e (L^(i) + L^(j)).
    lam = 0.5
    by_client = kappa(3, 2, lam) * float(got.sum()) / 3
    by_edge = (1 - lam) / (2 * 2) * ((l01 + l10) + (l12 + l21))
    assert by_client == pytest.approx(by_edge)


def test_balanced_loss_ignores_sample_counts() -> None:
    """Duplicating every row of one endpoint leaves its endpoint mean (equal endpoint weights) unchanged."""
    nbr, valid = neighbour_table(PATH.adjacency)
    z, mask = pad_rows([t.double() for t in Z])
    z2, mask2 = pad_rows([torch.cat([t, t]).double() for t in Z])
    torch.testing.assert_close(
        endpoint_losses(z, mask, B, THETA, nbr, valid), endpoint_losses(z2, mask2, B, THETA, nbr, valid)
    )


def test_incident_scores_add_the_count_prior() -> None:
    """Delta_1j(z) = log(n_j / n_1) + (b_j - b_1) + (theta_j - theta_1) z at z = 2, n = (10, 20, 40)."""
    pot = Potentials(B, THETA, torch.tensor([10, 20, 40]))
    z = torch.tensor([[2.0]], dtype=torch.float64)
    want = [math.log(0.5) - 0.5 - 2.0, 0.0, math.log(2.0) - 1.0 + 2.0]
    torch.testing.assert_close(pot.incident_scores(1, z)[0], torch.tensor(want, dtype=torch.float64))
    no_prior = [-0.5 - 2.0, 0.0, -1.0 + 2.0]
    torch.testing.assert_close(
        pot.incident_scores(1, z, prior=False)[0], torch.tensor(no_prior, dtype=torch.float64)
    )


def test_potentials_reject_bad_counts() -> None:
    with pytest.raises(ValueError, match="counts"):
        Potentials(B, THETA, torch.tensor([10, 0, 40]))
