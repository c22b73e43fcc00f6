"""A rest rule that can fire (issue 30): Lemma 1's rest on a 3-center hand case.

Center 0's true utility from peers 1 and 2 is fixed by hand; 1 and 2 help each other and both find
0 helpful. Credits are fed back as ABPS does (:meth:`BayesianSelector.observe`), with a small noise
drawn from one seed. Under :class:`PosteriorExceedance` center 0 rests once it has seen both peers
hurt it, and keeps a partner when one peer helps it; under Eq. 7 (the paper's default) it cannot
rest within 50 rounds whatever the credits (module docstring of
:mod:`lightning_fed.selection.abps.rest`).
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.selection.abps import (
    BayesianSelector,
    PosteriorExceedance,
    negative_transfer_threshold,
    ucb,
)
from lightning_fed.selection.diagnostics import rest_causes

ROUNDS = 20


def _replay(phi_to_0: tuple[float, float], acceptance, seed: int = 0) -> list[list[list[int]]]:
    """Partner sets per round; ``phi_to_0`` = true Shapley values of peers 1 and 2 to center 0."""
    phi = torch.tensor(
        [[0.0, phi_to_0[0], phi_to_0[1]], [0.05, 0.0, 0.05], [0.05, 0.05, 0.0]], dtype=torch.float64
    )
    gen = torch.Generator().manual_seed(seed)
    sel = BayesianSelector(kappa=2, epsilon=0.0, acceptance=acceptance)
    sel.setup(torch.zeros(3, 3), seed)
    rounds = []
    for r in range(ROUNDS):
        partners = sel.select(r)
        rounds.append(partners)
        if r >= ROUNDS // 2 and acceptance is not None and not partners[0]:
            causes = rest_causes(partners, torch.ones(3, dtype=torch.bool), sel.last_match)
            assert causes["rejected"] == 1  # the Lemma 1 rest, not capacity
        i = torch.tensor([a for a, ps in enumerate(partners) for _ in ps], dtype=torch.int64)
        j = torch.tensor([b for ps in partners for b in ps], dtype=torch.int64)
        noise = 0.01 * torch.randn(len(i), generator=gen, dtype=torch.float64)
        sel.observe(i, j, phi[i, j] + noise)
    return rounds


def test_rests_when_both_peers_are_below_c_neg() -> None:
    rounds = _replay((-0.05, -0.05), PosteriorExceedance())
    assert all(not p[0] for p in rounds[ROUNDS // 2 :])  # 0 rests in every late round
    assert all(p[1] == [2] for p in rounds[ROUNDS // 2 :])  # 1 and 2 keep collaborating


def test_does_not_rest_when_one_peer_is_above_c_neg() -> None:
    rounds = _replay((0.05, -0.05), PosteriorExceedance())
    assert all(p[0] == [1] for p in rounds[ROUNDS // 2 :])  # keeps the helpful peer, drops the other


def test_eq7_cannot_rest_on_the_same_case() -> None:
    """The paper's rule (default) keeps center 0 partnered though both peers hurt it."""
    rounds = _replay((-0.05, -0.05), None)
    assert all(p[0] for p in rounds)


def test_eq7_minimum_score_stays_above_tau_acc_through_round_50() -> None:
    """s_min(t) = 1/(t + 1) + 2 sqrt(ln t / t): n = t - 1 observations of phi_bar = 0."""
    t = torch.arange(1, 51)
    mean = 1.0 / (t + 1.0)
    scores = torch.stack([ucb(mean[k : k + 1], t[k : k + 1] - 1.0, int(t[k])) for k in range(50)]).reshape(-1)
    assert float(scores[1:].min()) == pytest.approx(1 / 51 + 2 * math.sqrt(math.log(50) / 50))
    assert float(scores[1:].min()) > 0.579 and float(scores[0]) == 0.5  # t = 1: the prior mean 0.5
    t73 = torch.tensor([73])
    assert float(ucb(1.0 / (t73 + 1.0), t73 - 1.0, 73)) < 0.5  # the first round Eq. 7 could reject


def test_c_neg_is_lemma_1s_and_the_rule_refuses_on_its_upper_bound() -> None:
    assert negative_transfer_threshold(-0.1, 0.1) == 0.5
    rule = PosteriorExceedance(scale=0.1)
    rule.setup(0.5)
    sel = BayesianSelector(kappa=1)
    sel.setup(torch.zeros(2, 3), 0)
    sel.posterior.update(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([0.2, 0.23]))
    table = rule.table(sel.posterior, 2).dense()
    # (1 + phi_bar) / 3 + 1.645 * 0.1 / sqrt 3 < 0.5 iff phi_bar < 0.215 (module docstring)
    assert float(table[0, 1]) < 0.05 < float(table[1, 0])
    assert float(table[0, 0]) == pytest.approx(0.5)  # an unobserved pair: Phi(0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"level": 0.7}, "level"),
        ({"level": 0.0}, "level"),
        ({"c_neg": 1.5}, "c_neg"),
        ({"scale": -1.0}, "scale"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field) -> None:
    with pytest.raises(
        ValueError, match=rf"algorithm\.init_args\.selector\.init_args\.acceptance\.init_args\.{field}"
    ):
        PosteriorExceedance(**kwargs)


def _many(phi_value: float, acceptance, centers: int = 40, rounds: int = 15) -> list[list[list[int]]]:
    """Every pair has true Shapley value ``phi_value`` (one concept per center when negative)."""
    gen = torch.Generator().manual_seed(1)
    sel = BayesianSelector(kappa=2, epsilon=0.0, acceptance=acceptance)
    sel.setup(torch.zeros(centers, 3), 0)
    out = []
    for r in range(rounds):
        partners = sel.select(r)
        out.append(partners)
        i = torch.tensor([a for a, ps in enumerate(partners) for _ in ps], dtype=torch.int64)
        j = torch.tensor([b for ps in partners for b in ps], dtype=torch.int64)
        if len(i):
            sel.observe(i, j, phi_value + 0.01 * torch.randn(len(i), generator=gen, dtype=torch.float64))
    return out


def test_the_empirical_prior_lets_centers_with_many_strangers_rest() -> None:
    """40 centers, 2 partners a round, 15 rounds: every center keeps unobserved candidates, so with the
    Beta prior (mean 0.5 = c_neg, always worth a try) no center ever rests although every peer hurts
    (the measured reason the rest never fired at 230 centers). With the track-record prior, a center
    whose observed credits are clearly harmful refuses strangers as well and rests."""
    late = slice(10, 15)
    beta = _many(-0.05, PosteriorExceedance())
    assert max(sum(not ps for ps in rnd) for rnd in beta[late]) <= 1  # matching capacity only
    empirical = _many(-0.05, PosteriorExceedance(empirical_prior=True))
    resting = [sum(not ps for ps in rnd) / len(rnd) for rnd in empirical[late]]
    assert min(resting) == 1.0


def test_the_empirical_prior_keeps_collaborating_where_peers_help() -> None:
    """Helpful peers: the track record stays above c_neg, strangers are tried, nobody rests but for
    the matching's capacity (at most one center of 40 in a round, as under the Beta prior)."""
    empirical = _many(0.05, PosteriorExceedance(empirical_prior=True))
    assert max(sum(not ps for ps in rnd) for rnd in empirical[5:]) <= 1
