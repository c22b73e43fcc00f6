"""A receiver that refuses (issue 30): ``RelativeAcceptance`` against Eq. 7 and ``PosteriorExceedance``.

Three checks: a hand case (one receiver, three helpful peers and an off-concept proposer whose
utility is just above ``c_neg``), the off-concept oracle of ``test_regression_oracle.py`` (50 centers,
8 off-concept, the recorded credit noise), and Lemma 1's rest on the 3-center case of
``test_rest.py`` (the rule reduces to ``PosteriorExceedance`` when every candidate is below ``c_neg``).
"""

from __future__ import annotations

import pytest
import torch

from lightning_fed.selection.abps import (
    BayesianSelector,
    PairRegression,
    PosteriorExceedance,
    RelativeAcceptance,
    propose_reject,
)
from lightning_fed.selection.abps.relative import relative_reference
from tests.selection.test_regression_oracle import CENTERS, OFF, _replay_off_concept
from tests.selection.test_rest import ROUNDS
from tests.selection.test_rest import _replay as _replay_three


def _hand_selector(acceptance) -> BayesianSelector:
    """Receiver 0; peers 1, 2, 3 help it, peer 4 (off-concept) barely does. Each pair (0, j) observed
    four times at a constant clipped credit: 0.70 (1), 0.65 (2), 0.60 (3), 0.52 (4), given as Shapley
    values ``phi = 0.2 phi_bar - 0.1`` (Eq. 5's inverse, the paper's clip). Every other pair is a
    stranger (prior mean 0.5)."""
    sel = BayesianSelector(kappa=4, epsilon=0.0, acceptance=acceptance)
    sel.setup(torch.zeros(5, 3), 0)
    credit = {1: 0.70, 2: 0.65, 3: 0.60, 4: 0.52}
    i = torch.zeros(16, dtype=torch.int64)
    j = torch.tensor([p for p in credit for _ in range(4)])
    phi_bar = torch.tensor([credit[p] for p in credit for _ in range(4)], dtype=torch.float64)
    sel.observe(i, j, 0.2 * phi_bar - 0.1)
    return sel


def test_the_receiver_refuses_the_off_concept_proposer_that_the_absolute_rules_accept() -> None:
    """Beta means of receiver 0 (prior Beta(1, 1), n = 4): (1 + 4 phi_bar) / 6 = 0.633 (1), 0.600 (2),
    0.567 (3), 0.513 (4). Its reference with quantile 0.5 is the lower median of the four, 0.567
    (peer 3), above c_neg = 0.5. With level 0.5 the rule accepts j iff its mean is >= 0.567: peers
    1, 2, 3, not 4. Eq. 7 (UCB >= 0.5) and PosteriorExceedance (P(u > 0.5) >= 0.05) accept 4: its
    mean is above c_neg."""
    rule = RelativeAcceptance(quantile=0.5, level=0.5, scale=0.05)
    sel = _hand_selector(rule)
    table = rule.table(sel.posterior, 2)
    assert rule.reference is not None and float(rule.reference[0]) == pytest.approx((1 + 4 * 0.60) / 6)
    row = table.rows(torch.tensor([0]))[0]
    assert [bool(row[j] >= rule.threshold) for j in (1, 2, 3, 4)] == [True, True, True, False]
    assert 4 not in sel.select(1)[0] and sel.select(1)[0] == [1, 2, 3]

    for absolute in (PosteriorExceedance(scale=0.05), None):
        other = _hand_selector(absolute)
        assert 4 in other.select(1)[0]  # they accept the barely-positive proposer


def test_eq7_also_accepts_the_proposer_by_score() -> None:
    """The same case under Eq. 7 directly: receiver 0's UCB of peer 4 at t = 2 is 0.513 + sqrt 2
    sqrt(2 ln 2 / 5) = 1.26 >= tau_acc 0.5; a proposal of 4 to 0 is accepted."""
    sel = _hand_selector(None)
    scores = sel.policy.pair_scores(sel.posterior, 2, torch.Generator().manual_seed(0))
    assert float(scores.rows(torch.tensor([0]))[0, 4]) >= 0.5
    only_4 = torch.zeros(5, 5, dtype=torch.bool)
    only_4[4, 0] = True
    partners = propose_reject(scores, only_4, 1, 0.5, 0.0, torch.Generator().manual_seed(0))
    assert partners[0] == [4]


def test_the_reference_is_a_candidate_quantile_floored_at_c_neg() -> None:
    mean = torch.tensor(
        [[0.0, 0.4, 0.6, 0.7], [0.3, 0.0, 0.2, 0.1], [0.5, 0.5, 0.0, 0.5], [0.9, 0.1, 0.1, 0.0]]
    )
    candidates = torch.ones(4, 4, dtype=torch.bool)
    candidates[3] = False
    ref = relative_reference(mean.double(), candidates, 0.5, 0.5)
    # row 0: lower median of (0.4, 0.6, 0.7) = 0.6; row 1: 0.2 < c_neg -> 0.5; row 2: 0.5;
    # row 3: no candidate -> c_neg
    assert ref.tolist() == pytest.approx([0.6, 0.5, 0.5, 0.5])


def _late_off_share(selector: BayesianSelector, seed: int) -> float:
    """Off-concept share of in-concept centers' slots over rounds 25-29, against chance (8 / 49)."""
    shares = _replay_off_concept(selector, seed)
    return sum(shares[25:]) / 5 / (int(OFF.sum()) / (CENTERS - 1))


def test_on_the_off_concept_oracle_only_the_relative_receiver_refuses() -> None:
    """Measured (seeds 0-2, rounds 25-29, PairRegression with the pooled peer effect): relative
    0.04, 0.08, 0.24x chance; Eq. 7 (tau_acc 0.5) 0.69, 0.41, 0.85x; PosteriorExceedance on the same
    model posterior 0.86, 1.00, 1.02x. Means over the three seeds are asserted."""
    seeds = (0, 1, 2)

    def mean_share(make) -> float:
        return sum(_late_off_share(make(), s) for s in seeds) / len(seeds)

    def policy() -> PairRegression:
        return PairRegression(peer_effect=True)

    relative = mean_share(
        lambda: BayesianSelector(
            kappa=3, policy=policy(), acceptance=RelativeAcceptance(level=0.5, model_posterior=True)
        )
    )
    eq7 = mean_share(lambda: BayesianSelector(kappa=3, tau_acc=0.5, policy=policy()))
    exceed = mean_share(
        lambda: BayesianSelector(
            kappa=3, policy=policy(), acceptance=PosteriorExceedance(model_posterior=True)
        )
    )
    assert relative <= 0.25
    assert eq7 > 0.4 and exceed > 0.4


def test_it_rests_as_lemma_1_says_on_the_three_center_case() -> None:
    """Both peers below c_neg: the reference is c_neg and center 0 rests; one above: it keeps it."""
    rounds = _replay_three((-0.05, -0.05), RelativeAcceptance())
    assert all(not p[0] for p in rounds[ROUNDS // 2 :])
    rounds = _replay_three((0.05, -0.05), RelativeAcceptance())
    assert all(p[0] == [1] for p in rounds[ROUNDS // 2 :])


@pytest.mark.parametrize("quantile", [1.5, -0.1])
def test_a_quantile_outside_0_1_names_the_field(quantile: float) -> None:
    with pytest.raises(ValueError, match=r"acceptance\.init_args\.quantile"):
        RelativeAcceptance(quantile=quantile)
