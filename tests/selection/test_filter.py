"""Goal-aware metadata pre-filter (ABPS Eq. 3)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.selection.abps import GOALS, calibrate_threshold, candidate_mask, goal_scores
from lightning_fed.selection.abps.filter import top_k_mask

# v0 = (3, 4), v1 = (4, 3), v2 = (1, 0): norms 5, 5, 1.
# cos(v0, v1) = (12 + 12) / 25 = 0.96, cos(v0, v2) = 3 / 5 = 0.6, cos(v1, v2) = 4 / 5 = 0.8.
# Coordinate 0 (the positive-class rate): |3 - 4| = 1, |3 - 1| = 2, |4 - 1| = 3.
META = torch.tensor([[3.0, 4.0], [4.0, 3.0], [1.0, 0.0]])
COS = torch.tensor([[0.0, 0.96, 0.6], [0.96, 0.0, 0.8], [0.6, 0.8, 0.0]], dtype=torch.float64)
ALIGN = -torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]], dtype=torch.float64)
OFF = ~torch.eye(3, dtype=torch.bool)


@pytest.mark.parametrize(
    ("goal", "expected"), [("homogeneity", COS), ("diversity", -COS), ("alignment", ALIGN)]
)
def test_goal_scores_match_hand_computed_values(goal: str, expected: torch.Tensor) -> None:
    scores = goal_scores(META, goal)
    assert scores.dtype == torch.float64
    assert torch.allclose(scores[OFF], expected[OFF], atol=1e-12)
    assert torch.isneginf(scores.diagonal()).all()


def test_unknown_goal_lists_the_allowed_goals() -> None:
    with pytest.raises(ValueError, match="alignment, diversity, homogeneity"):
        goal_scores(META, "similarity")
    with pytest.raises(ValueError, match="allowed goals"):
        candidate_mask(META, "nope")
    assert set(GOALS) == {"homogeneity", "diversity", "alignment"}


def test_zero_descriptor_has_cosine_zero() -> None:
    scores = goal_scores(torch.tensor([[0.0, 0.0], [1.0, 2.0]]), "homogeneity")
    assert scores[0, 1] == 0.0 and scores[1, 0] == 0.0


def test_fixed_threshold_keeps_pairs_at_or_above_it() -> None:
    mask = candidate_mask(META, "homogeneity", tau_sim=0.8)  # keeps 0.96 and 0.8 (>=), drops 0.6
    expected = torch.tensor([[False, True, False], [True, False, True], [False, True, False]])
    assert torch.equal(mask, expected)
    mask = candidate_mask(META, "alignment", tau_sim=-1.5)  # only |3 - 4| = 1 <= 1.5
    assert mask.nonzero().tolist() == [[0, 1], [1, 0]]


@pytest.mark.parametrize("goal", sorted(GOALS))
def test_no_threshold_keeps_every_off_diagonal_pair(goal: str) -> None:
    meta = torch.randn(7, 4, generator=torch.Generator().manual_seed(0))
    mask = candidate_mask(meta, goal)
    assert torch.equal(mask, ~torch.eye(7, dtype=torch.bool))


@pytest.mark.parametrize("goal", sorted(GOALS))
def test_keep_fraction_keeps_about_that_share_of_pairs(goal: str) -> None:
    c = 40
    meta = torch.rand(c, 15, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = candidate_mask(meta, goal, keep_fraction=0.25, keep="global")
    share = mask.sum().item() / (c * (c - 1))
    assert abs(share - 0.25) < 0.005
    assert not mask.diagonal().any()
    assert torch.equal(mask, mask.T)  # all three rules are symmetric
    # keep_fraction = 1 keeps everything (threshold = the minimum off-diagonal score)
    assert torch.equal(candidate_mask(meta, goal, keep_fraction=1.0), ~torch.eye(c, dtype=torch.bool))


def test_calibrated_threshold_is_the_quantile_of_off_diagonal_scores() -> None:
    scores = goal_scores(META, "alignment")  # off-diagonal values -1, -1, -2, -2, -3, -3
    assert calibrate_threshold(scores, 0.5) == pytest.approx(-2.0)
    assert calibrate_threshold(scores, 1.0) == pytest.approx(-3.0)
    assert math.isfinite(calibrate_threshold(scores, 1e-9))


def test_invalid_threshold_arguments() -> None:
    with pytest.raises(ValueError, match="not both"):
        candidate_mask(META, "homogeneity", tau_sim=0.5, keep_fraction=0.25)
    with pytest.raises(ValueError, match="keep_fraction"):
        candidate_mask(META, "homogeneity", keep_fraction=0.0)
    with pytest.raises(ValueError, match=r"\[C, d\]"):
        goal_scores(torch.zeros(3), "homogeneity")


@pytest.mark.parametrize("goal", sorted(GOALS))
def test_unpublished_centers_are_nobodys_candidates_and_calibrate_nothing(goal: str) -> None:
    """Only centers whose descriptor arrived take part: the threshold is calibrated over their pairs
    (the mask equals the mask of the published subset), with fewer than two published nobody has a
    candidate, and an all-True ``published`` is the same as none."""
    meta = torch.rand(9, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    published = torch.tensor([True, False, True, True, False, True, True, False, True])
    mask = candidate_mask(meta, goal, keep_fraction=0.25, published=published)
    sub = candidate_mask(meta[published], goal, keep_fraction=0.25)
    assert torch.equal(mask[published][:, published], sub)
    assert not mask[~published].any() and not mask[:, ~published].any()
    for few in (torch.zeros(9, dtype=torch.bool), torch.eye(9, dtype=torch.bool)[3]):
        assert not candidate_mask(meta, goal, keep_fraction=0.25, published=few).any()
    every = torch.ones(9, dtype=torch.bool)
    assert torch.equal(
        candidate_mask(meta, goal, keep_fraction=0.25, published=every),
        candidate_mask(meta, goal, keep_fraction=0.25),
    )
    with pytest.raises(ValueError, match=r"published must be a bool \[9\]"):
        candidate_mask(meta, goal, published=torch.ones(8, dtype=torch.bool))


@pytest.mark.parametrize("goal", sorted(GOALS))
def test_per_center_keeps_ceil_rho_n_minus_1_of_every_center_then_symmetrizes_by_union(goal: str) -> None:
    """``keep="per_center"``: before symmetrization every row holds exactly ``ceil(rho (n - 1))``
    candidates, its best-scoring peers; after the union every center keeps at least that many, the
    sets are symmetric, and ``C_i`` is exactly ``top_i | {j : i in top_j}``.

    With n = 40 and rho = 0.25: ``ceil(0.25 * 39) = ceil(9.75) = 10``.
    """
    c = 40
    meta = torch.rand(c, 15, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    top = top_k_mask(goal_scores(meta, goal), 0.25)
    assert top.sum(1).tolist() == [10] * c
    scores = goal_scores(meta, goal)
    for i in range(c):  # the kept peers are the 10 best of row i
        kept = scores[i][top[i]]
        assert float(kept.min()) >= float(scores[i][~top[i]].max())
    mask = candidate_mask(meta, goal, keep_fraction=0.25)  # per_center is the default
    assert torch.equal(mask, top | top.T)
    assert torch.equal(mask, mask.T)
    assert int(mask.sum(1).min()) >= 10
    assert not bool(mask.diagonal().any())


def test_per_center_gives_every_center_candidates_where_global_empties_some() -> None:
    """The failure the per-center mode fixes: under one global quantile a center far from everyone
    (here descriptor 0 points away from the rest) gets no candidate; per center it keeps its k."""
    meta = torch.ones(12, 3, dtype=torch.float64)
    meta[1:, 0] += torch.linspace(0, 0.1, 11, dtype=torch.float64)
    meta[0] = torch.tensor([-1.0, 1.0, 0.2], dtype=torch.float64)
    glob = candidate_mask(meta, "homogeneity", keep_fraction=0.25, keep="global")
    per = candidate_mask(meta, "homogeneity", keep_fraction=0.25, keep="per_center")
    assert int(glob[0].sum()) == 0
    assert int(per[0].sum()) >= 3  # ceil(0.25 * 11) = 3


def test_unknown_keep_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"filter\.init_args\.keep must be one of per_center, global"):
        candidate_mask(META, "homogeneity", keep_fraction=0.25, keep="both")


@pytest.mark.parametrize("c", [7, 300, 600])
def test_blocked_top_k_equals_one_full_sort(c: int) -> None:
    """top_k_mask sorts a block of rows at a time; with ties (rounded scores, ties towards lower ids)
    the mask is the one of a single [C, C] stable sort, as before issue 17."""
    from lightning_fed.selection.abps.filter import top_k_mask

    g = torch.Generator().manual_seed(c)
    scores = (
        torch.rand(c, c, generator=g, dtype=torch.float64).round(decimals=1).fill_diagonal_(float("-inf"))
    )
    for rho in (0.1, 0.25, 1.0):
        k = min(c - 1, math.ceil(rho * (c - 1) - 1e-9))
        want = torch.zeros(c, c, dtype=torch.bool)
        want.scatter_(1, torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k], True)
        assert torch.equal(top_k_mask(scores, rho), want.fill_diagonal_(False))
