"""Mechanism diagnostics: rests by cause on hand-built matchings, repeat rate, same-unit rate, spread."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.algorithms import ABPS
from lightning_fed.comm import Wire
from lightning_fed.models import MortalityMLP
from lightning_fed.selection.abps import BayesianSelector, propose_reject
from lightning_fed.selection.diagnostics import (
    MatchRecord,
    posterior_mean_spread,
    repeat_edges,
    rest_causes,
    same_group_slots,
)
from lightning_fed.types import RoundContext
from tests.conftest import make_federation

ALL3 = ~torch.eye(3, dtype=torch.bool)
UP3 = torch.ones(3, dtype=torch.bool)


def _match(scores: torch.Tensor, candidates: torch.Tensor, kappa: int, tau: float = 0.5):
    partners = propose_reject(scores, candidates, kappa, tau, 0.0, torch.Generator().manual_seed(0))
    return partners, MatchRecord(candidates, scores, tau)


def test_no_capacity_three_centers_one_slot_each() -> None:
    """3 centers, kappa 1, every score 0.9 >= tau: one pair forms whatever the order, and the third
    center, whom both others would accept on score, finds them full: cause no_capacity."""
    partners, match = _match(torch.full((3, 3), 0.9, dtype=torch.float64), ALL3, kappa=1)
    assert sorted(len(p) for p in partners) == [0, 1, 1]
    assert rest_causes(partners, UP3, match) == {
        "unavailable": 0,
        "no_candidates": 0,
        "no_capacity": 1,
        "rejected": 0,
    }


def test_rejected_is_the_lemma_1_rest() -> None:
    """Centers 0 and 1 score center 2 at 0.3 < tau_acc = 0.5 and 2 scores them at 0.3 too (row i is
    i's scores). 2 proposes to 0 and 1, who refuse on score; they propose to 2 (a proposer does not
    test its own score), who refuses on score. 0 and 1 pair. Center 2 rests: rejected, Lemma 1."""
    scores = torch.full((3, 3), 0.9, dtype=torch.float64)
    scores[0, 2] = scores[1, 2] = scores[2, 0] = scores[2, 1] = 0.3
    partners, match = _match(scores, ALL3, kappa=2)
    assert partners == [[1], [0], []]
    assert rest_causes(partners, UP3, match)["rejected"] == 1
    assert rest_causes(partners, UP3, match)["no_capacity"] == 0


def test_no_candidates_when_the_filter_leaves_none() -> None:
    """Center 0 is in nobody's candidate set and has none: it rests with cause no_candidates."""
    cand = ALL3.clone()
    cand[0, :] = False
    cand[:, 0] = False
    partners, match = _match(torch.full((3, 3), 0.9, dtype=torch.float64), cand, kappa=1)
    assert partners == [[], [2], [1]]
    assert rest_causes(partners, UP3, match)["no_candidates"] == 1


def test_unavailable_comes_first_and_causes_sum_to_the_rests() -> None:
    """4 centers, center 3 down (faults): it rests as unavailable, not as no_candidates; with kappa 1
    the other three form one pair and one no_capacity rest. Total 2 = the resting centers."""
    up = torch.tensor([True, True, True, False])
    cand = ~torch.eye(4, dtype=torch.bool) & up[None, :] & up[:, None]
    partners, match = _match(torch.full((4, 4), 0.9, dtype=torch.float64), cand, kappa=1)
    causes = rest_causes(partners, up, match)
    assert causes["unavailable"] == 1 and causes["no_capacity"] == 1
    assert sum(causes.values()) == sum(1 for p in partners if not p) == 2


def test_repeat_same_unit_and_spread_by_hand() -> None:
    """Edges {01, 23} then {01, 12}: 1 of 2 repeats. Units (0, 0, 1, 1), all candidates: partner
    slots 0-1, 1-0 same, 1-2, 2-1 not -> 2 / 4; each center has 1 of 3 candidates in its unit, so
    chance = 1/3. Spread: rows of means (0.5, 0.7, 0.3) over 2 candidates each: std 0.1 per row."""
    assert repeat_edges([[1], [0, 2], [1], []], [[1], [0], [3], [2]]) == (1, 2)
    same, expected, slots = same_group_slots(
        [[1], [0, 2], [1], []], ~torch.eye(4, dtype=torch.bool), torch.tensor([0, 0, 1, 1])
    )
    assert (same, slots) == (2, 4) and expected == pytest.approx(4 / 3)
    mean = torch.tensor([[0.0, 0.6, 0.4], [0.8, 0.0, 0.6], [0.2, 0.4, 0.0]], dtype=torch.float64)
    assert posterior_mean_spread(mean, ALL3) == pytest.approx(0.1)


def test_abps_reports_the_diagnostics_and_the_causes_sum_to_isolation_rate() -> None:
    """Through ABPS.aggregate on 4 centers for 3 rounds with kappa 1: every per-round and summary
    cause share sums to the isolation rate, and the repeat rate and spread are reported."""
    data = make_federation([30, 20, 25, 15])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = ABPS(selector=BayesianSelector(kappa=1))
    algo.setup(data, module, seed=0)
    params = {
        n: torch.stack([p.detach().clone() + k for k in range(4)]) for n, p in module.named_parameters()
    }
    wire = Wire()
    for r in range(3):
        ctx = RoundContext(round=r, seed=0, val_utility=lambda p, c: p["layers.0.bias"][:, 0].double())
        params = algo.aggregate(ctx, params, wire)
        stats = algo.round_stats()
        causes = sum(
            stats[f"isolation_{c}"] for c in ("unavailable", "no_candidates", "no_capacity", "rejected")
        )
        assert causes == pytest.approx(stats["isolation_rate"])
        assert "posterior_mean_spread" in stats
    summary = algo.summary_stats()
    causes = sum(
        summary[f"isolation_{c}"] for c in ("unavailable", "no_candidates", "no_capacity", "rejected")
    )
    assert causes == pytest.approx(summary["isolation_rate"])
    assert 0.0 <= summary["partner_repeat_rate"] <= 1.0
    state = algo.state_dict()
    again = ABPS(selector=BayesianSelector(kappa=1))
    again.setup(data, module, seed=0)
    again.load_state_dict(state)
    assert again.summary_stats() == summary


def _reference_rest_causes(partners, available, match) -> dict[str, int]:
    """rest_causes before issue 17 (dense [C, C] masks), verbatim."""
    resting = torch.tensor([not p for p in partners], dtype=torch.bool)
    available = available.to(torch.bool).reshape(-1)
    out = dict.fromkeys(("unavailable", "no_candidates", "no_capacity", "rejected"), 0)
    out["unavailable"] = int((resting & ~available).sum())
    up = resting & available
    cand = match.candidates.to(torch.bool).clone()
    cand.fill_diagonal_(False)
    cand &= available.unsqueeze(0) & available.unsqueeze(1)
    has = cand.any(1)
    out["no_candidates"] = int((up & ~has).sum())
    if match.scores is None:
        accepts_me = cand
    else:
        accepts_me = cand & (match.scores.transpose(0, 1).to(torch.float64) >= match.tau_acc)
    would = accepts_me.any(1)
    out["no_capacity"] = int((up & has & would).sum())
    out["rejected"] = int((up & has & ~would).sum())
    return out


def _reference_spread(mean: torch.Tensor, candidates: torch.Tensor) -> float:
    """posterior_mean_spread before issue 17 (dense), verbatim."""
    cand = candidates.to(torch.bool).clone()
    cand.fill_diagonal_(False)
    size = cand.sum(1)
    rows = size >= 2
    if not bool(rows.any()):
        return 0.0
    m = mean.to(torch.float64)
    w = cand.to(torch.float64)
    mu = (m * w).sum(1) / size.clamp(min=1)
    var = (((m - mu[:, None]) ** 2) * w).sum(1) / size.clamp(min=1)
    return float(var.sqrt()[rows].mean())


def _reference_same_group(partners, candidates, groups) -> tuple[int, float, int]:
    """same_group_slots before issue 17 (dense masks, a loop over slots), verbatim."""
    cand = candidates.to(torch.bool).clone()
    cand.fill_diagonal_(False)
    same_mask = groups[:, None] == groups[None, :]
    share = (cand & same_mask).sum(1).to(torch.float64) / cand.sum(1).clamp(min=1).to(torch.float64)
    same, expected, slots = 0, 0.0, 0
    for i, ps in enumerate(partners):
        for j in ps:
            same += int(groups[i] == groups[j])
            expected += float(share[i])
            slots += 1
    return same, expected, slots


@pytest.mark.parametrize("c", [9, 300, 530])
def test_blocked_diagnostics_equal_the_dense_reference(c: int) -> None:
    """Random posteriors, candidate masks, availability and UCB tables: rest causes, spread and
    same-unit slots read by blocks of rows equal the dense computations exactly."""
    from lightning_fed.selection.abps.policy import UCB
    from lightning_fed.selection.abps.posterior import BetaPosterior

    g = torch.Generator().manual_seed(c)
    post = BetaPosterior(c)
    key = torch.unique(torch.randint(0, c * c, (4 * c,), generator=g))
    keep = key // c != key % c
    post.update(key[keep] // c, key[keep] % c, torch.rand(int(keep.sum()), generator=g, dtype=torch.float64))
    half = torch.rand(c, c, generator=g) < 0.02 + 4.0 / c
    cand = (half | half.T) & ~torch.eye(c, dtype=torch.bool)
    cand[0] = False  # a center with no candidate, one with a single one
    cand[:, 0] = False
    cand[1] = False
    cand[1, 2] = True
    up = torch.rand(c, generator=g) > 0.1
    groups = torch.randint(0, 4, (c,), generator=g)
    for t, tau in ((1, 0.5), (4, 2.0), (4, 0.5)):
        table = UCB().pair_scores(post, t, torch.Generator())
        avail_cand = cand & up[None, :] & up[:, None]
        partners = propose_reject(table, avail_cand, 2, tau, 0.1, torch.Generator().manual_seed(t))
        for scores in (table, table.dense(), None):
            match = MatchRecord(avail_cand, scores, tau)
            dense = MatchRecord(avail_cand, None if scores is None else table.dense(), tau)
            assert rest_causes(partners, up, match) == _reference_rest_causes(partners, up, dense)
        assert same_group_slots(partners, avail_cand, groups) == _reference_same_group(
            partners, avail_cand, groups
        )
    want = _reference_spread(post.mean(), cand)
    assert posterior_mean_spread(post, cand) == want
    assert posterior_mean_spread(post.mean(), cand) == want


def test_flagged_partner_slots_by_hand() -> None:
    """4 centers, 1 and 3 flagged: unflagged receivers 0 and 2 have two slots each, one to a flagged
    peer; each one's candidates hold 2 flagged of 3, so the expected count is 4 x 2/3. Flagged
    receivers' slots are not counted."""
    from lightning_fed.selection.diagnostics import flagged_partner_slots

    flagged = torch.tensor([False, True, False, True])  # 1 and 3 flagged
    partners = [[1, 2], [0], [0, 3], [2]]
    cand = ~torch.eye(4, dtype=torch.bool)
    hits, expected, slots = flagged_partner_slots(partners, cand, flagged)
    # receivers 0 and 2 (unflagged): 0 -> {1 (hit), 2}, 2 -> {0, 3 (hit)}; each sees 2 of 3 flagged
    assert (hits, slots) == (2, 4)
    assert expected == pytest.approx(4 * 2 / 3)
