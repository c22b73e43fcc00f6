"""Prediction rules on hand-built routes; workload counts on hand-built routes (App. D.1)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.referral.prediction import HardTerminal, UniformHistory, WeightedHistory
from lightning_fed.referral.routers import Routes
from lightning_fed.referral.workload import client_calls, edge_traffic, workload

# Query 0: a 3-hop route 0 -> 2 -> 1 -> 3 with accepted move scores 1.0, 0.5, 0.25.
# Query 1: stopped at its entry (client 1) with budget L = 3 left unused.
P = torch.tensor(
    [
        [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.3, 0.3, 0.4]],
        [[0.2, 0.3, 0.5], [1, 1, 1], [1, 1, 1], [1, 1, 1]],  # padded hops hold junk, must be ignored
    ],
    dtype=torch.float64,
)
ROUTES = Routes(
    visited=torch.tensor([[0, 2, 1, 3], [1, -1, -1, -1]]),
    scores=torch.tensor([[0.0, 1.0, 0.5, 0.25], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64),
    logits=P.log(),  # softmax(log p) = p
    incident=torch.tensor([7, 2]),
)


def test_weighted_history_is_the_hand_mixture_on_a_three_hop_route() -> None:
    """Accumulated scores A = (0, 1, 1.5, 1.75); w_t = e^{A_t} / (1 + e + e^1.5 + e^1.75):
    e = 2.718281828, e^1.5 = 4.481689070, e^1.75 = 5.754602676, sum = 13.954573574, so
    w = (0.0716611, 0.1947950, 0.3211627, 0.4123811), and f_mix = sum_t w_t p_t:
    class 0: .0716611*.7 + .1947950*.2 + .3211627*.1 + .4123811*.3 = 0.2449524,
    class 1: .0716611*.2 + .1947950*.5 + .3211627*.3 + .4123811*.3 = 0.3317929,
    class 2: .0716611*.1 + .1947950*.3 + .3211627*.6 + .4123811*.4 = 0.4232547 -> class 2."""
    w = WeightedHistory().weights(ROUTES)
    torch.testing.assert_close(
        w[0],
        torch.tensor([0.0716611, 0.1947950, 0.3211627, 0.4123811], dtype=torch.float64),
        atol=1e-6,
        rtol=0,
    )
    assert w[1].tolist() == [1.0, 0.0, 0.0, 0.0]
    mix = WeightedHistory().probabilities(ROUTES)
    torch.testing.assert_close(
        mix[0], torch.tensor([0.2449524, 0.3317929, 0.4232547], dtype=torch.float64), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(mix[1], P[1, 0])
    assert WeightedHistory().predict(ROUTES).tolist() == [2, 2]


def test_hard_terminal_and_uniform_history() -> None:
    """Hard terminal: the last visited expert (query 0: p_3 -> class 2; query 1: its entry).
    Uniform: mean of p_0..p_3 = (0.325, 0.325, 0.35) for query 0."""
    torch.testing.assert_close(HardTerminal().probabilities(ROUTES), torch.stack([P[0, 3], P[1, 0]]))
    uni = UniformHistory().probabilities(ROUTES)
    torch.testing.assert_close(uni[0], torch.tensor([0.325, 0.325, 0.35], dtype=torch.float64))
    torch.testing.assert_close(uni[1], P[1, 0])
    # A temperature of 2 halves the accumulated scores: w_0 = 1 / (1 + e^.5 + e^.75 + e^.875).
    w0 = 1.0 / (1.0 + math.exp(0.5) + math.exp(0.75) + math.exp(0.875))
    assert float(WeightedHistory(temperature=2.0).weights(ROUTES)[0, 0]) == pytest.approx(w0)
    with pytest.raises(ValueError, match="temperature"):
        WeightedHistory(temperature=0.0)


def test_workload_counts_and_shares() -> None:
    """Tiers (s, s, m, l). Calls: C = (1, 2, 1, 1) from routes {0,2,1,3} and {1}: C_all = 5 = (3+1)+(0+1),
    Q = 2: calls/query 2.5; share s = 3/5 = 60 %, m = l = 20 %; calls/100 arrivals s = 150, l = 50;
    peak share = 2/5 = 40 %; incident scores per query (7 + 2)/2 = 4.5."""
    assert client_calls(ROUTES, 4).tolist() == [1, 2, 1, 1]
    w = workload(ROUTES, 4, ("s", "s", "m", "l"))
    assert w["calls_per_query"] == pytest.approx(2.5)
    assert w["incident_per_query"] == pytest.approx(4.5)
    assert (w["share_s"], w["share_m"], w["share_l"]) == pytest.approx((60.0, 20.0, 20.0))
    assert (w["calls_per_100_s"], w["calls_per_100_l"]) == pytest.approx((150.0, 50.0))
    assert w["peak_share"] == pytest.approx(40.0)
    traffic = edge_traffic(ROUTES, 4)
    assert traffic[0, 2] == traffic[2, 0] == 1 and traffic[1, 2] == 1 and traffic[1, 3] == 1
    assert int(traffic.sum()) == 2 * 3
    with pytest.raises(ValueError, match="tiers"):
        workload(ROUTES, 4, ("s", "m"))
