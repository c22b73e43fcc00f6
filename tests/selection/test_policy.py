"""Selection policies against closed forms: UCB (Eq. 7), ScaledUCB's noise scale, Thompson's Beta draws."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.selection.abps import BayesianSelector
from lightning_fed.selection.abps.policy import UCB, ScaledUCB, Thompson
from lightning_fed.selection.abps.posterior import BetaPosterior
from lightning_fed.selection.abps.ucb import ucb


def _posterior() -> BetaPosterior:
    post = BetaPosterior(3)
    post.update(torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0]), torch.tensor([0.6, 0.8, 0.3]))
    return post


def test_ucb_policy_is_eq_7() -> None:
    post = _posterior()
    got = UCB(gamma=0.3).scores(post, 4, torch.Generator())
    assert torch.equal(got, ucb(post.mean(), post.count, 4, 0.3))


def test_scaled_ucb_scale_is_twice_the_pooled_within_pair_std_by_hand() -> None:
    """Observations: pair (0, 1) saw 0.6 and 0.8, pair (1, 0) saw 0.3: N = 3, P = 2 pairs.
    Within-pair sum of squares: (0.6 - 0.7)^2 + (0.8 - 0.7)^2 + 0 = 0.02 on N - P = 1 dof, so
    sigma_w = sqrt(0.02) = 0.14142 and s = 2 sigma_w = 0.28284. The score is Eq. 7 with gamma s:
    for (0, 1) at t = 4: mu = (1 + 1.4) / (2 + 2) = 0.6, bonus = gamma s sqrt(2 ln 4 / 3)."""
    post, policy = _posterior(), ScaledUCB(gamma=1.0)
    assert policy.s() == 1.0  # before any observation: Eq. 7 itself
    policy.observe(torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0]), torch.tensor([0.6, 0.8, 0.3]), 3)
    assert policy.s() == pytest.approx(2 * math.sqrt(0.02))
    scores = policy.scores(post, 4, torch.Generator())
    assert float(scores[0, 1]) == pytest.approx(0.6 + 2 * math.sqrt(0.02) * math.sqrt(2 * math.log(4) / 3))
    state = policy.state_dict()
    again = ScaledUCB(gamma=1.0)
    again.load_state_dict(state)
    assert again.s() == policy.s()


def test_scaled_ucb_with_one_observation_per_pair_falls_back_to_eq_7() -> None:
    policy = ScaledUCB()
    policy.observe(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([0.9, 0.1]), 2)
    assert policy.s() == 1.0  # N - P = 0: no within-pair information yet


def test_scaled_ucb_fixed_scale_one_is_ucb() -> None:
    post = _posterior()
    assert torch.equal(
        ScaledUCB(gamma=0.7, scale=1.0).scores(post, 5, torch.Generator()),
        UCB(gamma=0.7).scores(post, 5, torch.Generator()),
    )


def test_thompson_draws_match_the_beta_moments_and_are_reproducible() -> None:
    """Beta(a, b): mean a / (a + b), variance ab / ((a + b)^2 (a + b + 1)); here Beta(3, 2):
    mean 0.6, variance 6 / (25 * 6) = 0.04."""
    post = BetaPosterior(200, alpha0=3.0, beta0=2.0)
    draws = Thompson().scores(post, 1, torch.Generator().manual_seed(5))
    assert float(draws.mean()) == pytest.approx(0.6, abs=0.005)
    assert float(draws.var()) == pytest.approx(0.04, abs=0.002)
    assert torch.equal(draws, Thompson().scores(post, 1, torch.Generator().manual_seed(5)))
    assert not torch.equal(draws, Thompson().scores(post, 1, torch.Generator().manual_seed(6)))
    assert bool(((draws >= 0) & (draws <= 1)).all())


def test_gamma_belongs_to_the_policy_when_one_is_given() -> None:
    with pytest.raises(
        ValueError, match=r"give gamma under algorithm\.init_args\.selector\.init_args\.policy"
    ):
        BayesianSelector(gamma=0.1, policy=UCB(0.1))
    assert BayesianSelector(gamma=0.1).policy.gamma == 0.1


def test_default_policy_reproduces_the_paper_ucb_bit_for_bit() -> None:
    """The default selector's partner sets are those of an explicit UCB(sqrt 2) policy, round by round."""
    results = []
    for policy in (None, UCB(math.sqrt(2.0))):
        sel = BayesianSelector(kappa=2, policy=policy)
        sel.setup(torch.zeros(12, 3), seed=3)
        rounds = []
        for r in range(4):
            p = sel.select(r)
            i = torch.tensor([a for a, ps in enumerate(p) for _ in ps])
            j = torch.tensor([b for ps in p for b in ps])
            sel.observe(i, j, 0.05 * torch.cos(i.double() * 3 + j.double()))
            rounds.append(p)
        results.append(rounds)
    assert results[0] == results[1]


def _observed_posterior(c: int, rounds: int, seed: int) -> tuple[BetaPosterior, list]:
    """A posterior after ``rounds`` batches of observations of random distinct pairs (and the
    batches, for policies that observe them too)."""
    g = torch.Generator().manual_seed(seed)
    post, batches = BetaPosterior(c), []
    for _ in range(rounds):
        key = torch.unique(torch.randint(0, c * c, (3 * c,), generator=g))
        i, j = key // c, key % c
        keep = i != j
        i, j = i[keep], j[keep]
        phi = torch.rand(len(i), generator=g, dtype=torch.float64).round(decimals=1)  # ties and 0.5s
        post.update(i, j, phi)
        batches.append((i, j, phi))
    return post, batches


@pytest.mark.parametrize("t", [1, 2, 9])
def test_sparse_ucb_table_is_the_dense_eq_7_bit_for_bit(t: int) -> None:
    """UCB's SparseScores (Eq. 7 on the observed pairs, one prior score elsewhere) equals Eq. 7 on
    the dense mean and count matrices entry by entry, and so do its row and column blocks."""
    post, _ = _observed_posterior(300, 3, seed=t)
    want = ucb(post.mean(), post.count, t, 0.9)
    table = UCB(gamma=0.9).pair_scores(post, t, torch.Generator())
    assert torch.equal(table.dense(), want)
    assert torch.equal(UCB(gamma=0.9).scores(post, t, torch.Generator()), want)
    index = torch.tensor([299, 0, 17, 17, 150])
    assert torch.equal(table.rows(index), want[index])
    assert torch.equal(table.cols(index), want[:, index])
    assert not table.has_nan()


def _reference_scaled_s(batches: list, c: int, min_scale: float = 1e-3) -> float:
    """ScaledUCB.s() before issue 17: dense [C, C] sums, verbatim."""
    shape = (c, c)
    total, sumsq, count = (torch.zeros(shape, dtype=torch.float64) for _ in range(3))
    for i, j, x in batches:
        total.index_put_((i, j), x, accumulate=True)
        sumsq.index_put_((i, j), x * x, accumulate=True)
        count.index_put_((i, j), torch.ones_like(x), accumulate=True)
    seen = count > 0
    dof = float(count.sum()) - int(seen.sum())
    if dof < 1:
        return 1.0
    ss = float(sumsq.sum()) - float((total[seen] ** 2 / count[seen]).sum())
    return max(2.0 * math.sqrt(max(ss, 0.0) / dof), min_scale)


def test_scaled_ucb_scale_and_scores_equal_the_dense_reference_bit_for_bit() -> None:
    c = 257
    post, batches = _observed_posterior(c, 5, seed=4)
    policy = ScaledUCB(gamma=1.1)
    for k, (i, j, phi) in enumerate(batches):
        policy.observe(i, j, phi, c)
        assert policy.s() == _reference_scaled_s(batches[: k + 1], c)
    s = _reference_scaled_s(batches, c)
    assert torch.equal(policy.scores(post, 6, torch.Generator()), ucb(post.mean(), post.count, 6, 1.1 * s))
    # A dense state from before issue 17 loads and gives the same scale.
    dense = {
        "sum": policy.stats.dense("sum"),
        "sumsq": policy.stats.dense("sumsq"),
        "count": policy.stats.dense("count"),
    }
    old = ScaledUCB(gamma=1.1)
    old.load_state_dict(dense)
    assert old.s() == s
    again = ScaledUCB(gamma=1.1)
    again.load_state_dict(policy.state_dict())
    assert again.s() == s


def _reference_thompson(post: BetaPosterior, generator: torch.Generator) -> torch.Tensor:
    """Thompson.scores() before issue 17 (one [C, C] gamma draw each for alpha and beta), verbatim."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ga = torch._standard_gamma(post.alpha.to(torch.float64))
        gb = torch._standard_gamma(post.beta.to(torch.float64))
    total = ga + gb
    return torch.where(total > 0, ga / total.clamp(min=torch.finfo(torch.float64).tiny), 0.5)


@pytest.mark.parametrize("c", [5, 256, 300, 600])
def test_blocked_thompson_draws_equal_one_dense_draw(c: int) -> None:
    """The gamma draws made a block of rows at a time continue one random stream: the same samples
    as one [C, C] call, for sizes below, at and across the block size."""
    post, _ = _observed_posterior(c, 2, seed=c)
    got = Thompson().scores(post, 3, torch.Generator().manual_seed(11))
    assert torch.equal(got, _reference_thompson(post, torch.Generator().manual_seed(11)))
    table = Thompson().pair_scores(post, 3, torch.Generator().manual_seed(11))
    assert torch.equal(table.dense(), got)
