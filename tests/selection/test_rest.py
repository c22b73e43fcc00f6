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
    PairRegression,
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


def _grouped(acceptance, policy, groups: torch.Tensor, phi, rounds: int = 15):
    """40-center replay with declared groups; ``phi(i, j)`` the true Shapley values. Returns the
    partner sets and the selector's ``rest_*`` diagnostics per round."""
    gen = torch.Generator().manual_seed(1)
    sel = BayesianSelector(kappa=2, epsilon=0.0, acceptance=acceptance, policy=policy)
    sel.declare([{"care_unit": int(g)} for g in groups])
    sel.setup(torch.zeros(len(groups), 3), 0)
    out, diagnostics = [], []
    for r in range(rounds):
        partners = sel.select(r)
        out.append(partners)
        diagnostics.append(sel.round_diagnostics())
        i = torch.tensor([a for a, ps in enumerate(partners) for _ in ps], dtype=torch.int64)
        j = torch.tensor([b for ps in partners for b in ps], dtype=torch.int64)
        if len(i):
            sel.observe(i, j, phi(i, j) + 0.01 * torch.randn(len(i), generator=gen, dtype=torch.float64))
    return out, diagnostics


def test_the_model_posterior_rests_every_center_where_every_peer_hurts() -> None:
    """Every pair -0.05 (phi_bar 0.25): after one round the pooled intercept is about 0.25 with a
    tight posterior and no pair residual, so every candidate's bound u_hat + z s is below c_neg and
    every center rests (the Lemma 1 rest, ``rest_refuses_all`` 1); where every pair helps nobody
    rests but for the matching's capacity."""
    groups = torch.zeros(40, dtype=torch.int64)
    model = PosteriorExceedance(model_posterior=True)
    hurt, diag = _grouped(
        model, PairRegression(metadata_dim=0), groups, lambda i, j: torch.full(i.shape, -0.05)
    )
    assert all(not ps for rnd in hurt[2:] for ps in rnd)
    assert all(d["rest_refuses_all"] == 1.0 for d in diag[2:])
    assert diag[0]["rest_refuses_all"] == 0.0  # before any credit: the prior, every stranger is tried
    helped, diag = _grouped(
        PosteriorExceedance(model_posterior=True),
        PairRegression(metadata_dim=0),
        groups,
        lambda i, j: torch.full(i.shape, 0.05),
    )
    assert max(sum(not ps for ps in rnd) for rnd in helped[2:]) <= 1
    assert all(d["rest_refuses_all"] == 0.0 for d in diag[2:])


def test_the_model_posterior_refuses_strangers_of_the_harmful_group() -> None:
    """4 declared groups of 10: same-group pairs +0.05, cross-group -0.05. The model learns the
    same-group coefficient from everyone's credits and refuses cross-group strangers, so from round 2
    every partnership is within a group; the Beta prior keeps trying cross-group strangers (each is
    worth one try under Phi(0) = 0.5 >= level)."""
    groups = torch.arange(40) % 4

    def phi(i, j):
        return torch.where(groups[i] == groups[j], 0.05, -0.05).to(torch.float64)

    def same_share(rounds):
        slots = [(a, b) for rnd in rounds for a, ps in enumerate(rnd) for b in ps]
        return sum(bool(groups[a] == groups[b]) for a, b in slots) / len(slots)

    model, _ = _grouped(
        PosteriorExceedance(model_posterior=True), PairRegression(metadata_dim=0), groups, phi
    )
    beta, _ = _grouped(PosteriorExceedance(), PairRegression(metadata_dim=0), groups, phi)
    assert same_share(model[2:]) == 1.0
    assert same_share(beta[2:]) < 0.97


def test_the_stranger_diagnostics_say_why_the_beta_prior_cannot_rest() -> None:
    """``rest_stranger_bound``: the Beta prior's stranger bound 0.5 + z sigma / sqrt 2 stays above
    c_neg (no center's strangers refused) although every peer hurts; the empirical prior's falls
    below it."""
    groups = torch.zeros(40, dtype=torch.int64)
    z = 1.6448536269514722
    _, beta = _grouped(
        PosteriorExceedance(), PairRegression(metadata_dim=0), groups, lambda i, j: torch.full(i.shape, -0.05)
    )
    for d in beta[3:]:
        assert d["rest_stranger_bound"] == pytest.approx(0.5 + z * d["rest_sigma"] / math.sqrt(2.0))
        assert d["rest_stranger_refused"] == 0.0 and d["rest_c_neg"] == 0.5
        assert d["rest_track_record"] < 0.4
    _, emp = _grouped(
        PosteriorExceedance(empirical_prior=True),
        PairRegression(metadata_dim=0),
        groups,
        lambda i, j: torch.full(i.shape, -0.05),
    )
    assert emp[-1]["rest_stranger_refused"] == 1.0


def test_model_posterior_needs_a_policy_with_a_model() -> None:
    with pytest.raises(ValueError, match=r"acceptance\.init_args\.model_posterior .*PairRegression"):
        BayesianSelector(acceptance=PosteriorExceedance(model_posterior=True)).setup(torch.zeros(3, 3), 0)
    with pytest.raises(ValueError, match=r"acceptance\.init_args\.empirical_prior"):
        PosteriorExceedance(model_posterior=True, empirical_prior=True)
