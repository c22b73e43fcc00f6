"""Propose-reject matching with rest (ABPS Algorithm 1 lines 13-22)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps import propose_reject

TAU = 0.5


def _gen(seed: int) -> torch.Generator:
    return torch_generator(seed, "test-matching")


def _all(c: int) -> torch.Tensor:
    return ~torch.eye(c, dtype=torch.bool)


def _only_row(c: int, i: int) -> torch.Tensor:
    """Candidates where only center ``i`` may propose."""
    cand = torch.zeros(c, c, dtype=torch.bool)
    cand[i] = True
    cand[i, i] = False
    return cand


def _check_invariants(partners, ucb, cand, kappa) -> None:
    c = len(partners)
    for i, p in enumerate(partners):
        assert len(p) <= kappa
        assert i not in p
        assert p == sorted(set(p))
        for j in p:
            assert i in partners[j]  # symmetric
            assert cand[i, j] or cand[j, i]  # someone proposed to a candidate
            # the receiver accepted: i proposed to j (j's score on i) or j proposed to i
            assert (cand[i, j] and ucb[j, i] >= TAU) or (cand[j, i] and ucb[i, j] >= TAU)
    assert sum(len(p) for p in partners) % 2 == 0 and c == ucb.shape[0]


@pytest.mark.parametrize("kappa", [1, 2, 3])
def test_invariants_on_random_instances(kappa: int) -> None:
    c = 30
    for seed in range(20):
        g = _gen(seed)
        ucb = torch.rand(c, c, generator=g, dtype=torch.float64)
        half = torch.rand(c, c, generator=g) < 0.4
        cand = (half | half.T) & _all(c)
        partners = propose_reject(ucb, cand, kappa, TAU, 0.2, g)
        _check_invariants(partners, ucb, cand, kappa)


def test_same_generator_state_gives_same_matching() -> None:
    g = _gen(0)
    ucb = torch.rand(40, 40, generator=g, dtype=torch.float64).round(decimals=1)  # many ties
    first = propose_reject(ucb, _all(40), 3, TAU, 0.1, _gen(7))
    assert propose_reject(ucb, _all(40), 3, TAU, 0.1, _gen(7)) == first


def test_center_rejected_by_everyone_and_rejecting_everyone_rests() -> None:
    c, kappa = 8, 2
    ucb = torch.full((c, c), 0.9, dtype=torch.float64)
    ucb[:, 0] = 0.2  # every peer rejects 0's proposals
    ucb[0, :] = 0.2  # and 0 rejects every proposal made to it
    for seed in range(20):
        partners = propose_reject(ucb, _all(c), kappa, TAU, 0.3, _gen(seed))
        assert partners[0] == []
        assert all(0 not in p for p in partners)
        assert sum(len(p) for p in partners) >= c  # the others still pair up among themselves
        _check_invariants(partners, ucb, _all(c), kappa)


def test_proposer_does_not_test_its_own_score() -> None:
    # 1 rates 0 below tau but still proposes to it; 0 rates 1 highly and accepts (line 19).
    ucb = torch.tensor([[0.0, 0.9], [0.2, 0.0]], dtype=torch.float64)
    for seed in range(10):
        assert propose_reject(ucb, _all(2), 1, TAU, 0.0, _gen(seed)) == [[1], [0]]
    ucb[0, 1] = 0.4  # now both reject: both rest
    assert propose_reject(ucb, _all(2), 1, TAU, 0.0, _gen(0)) == [[], []]


def test_no_candidates_means_everyone_rests() -> None:
    c = 6
    partners = propose_reject(torch.ones(c, c), torch.zeros(c, c, dtype=torch.bool), 2, TAU, 0.5, _gen(0))
    assert partners == [[] for _ in range(c)]


def test_capacity_of_a_popular_center_is_kappa() -> None:
    c, kappa = 12, 2
    ucb = torch.full((c, c), 0.6, dtype=torch.float64)
    ucb[:, 0] = 1.0  # everybody ranks 0 first
    for seed in range(10):
        partners = propose_reject(ucb, _all(c), kappa, TAU, 0.0, _gen(seed))
        assert len(partners[0]) == kappa
        _check_invariants(partners, ucb, _all(c), kappa)


def test_epsilon_zero_takes_the_top_kappa_when_everyone_accepts() -> None:
    c = 6
    ucb = torch.full((c, c), 0.9, dtype=torch.float64)
    ucb[0] = torch.tensor([0.0, 0.7, 0.95, 0.7, 0.8, 0.6], dtype=torch.float64)
    for seed in range(20):
        partners = propose_reject(ucb, _only_row(c, 0), 2, TAU, 0.0, _gen(seed))
        assert partners[0] == [2, 4]
        partners = propose_reject(ucb, _all(c), 1, TAU, 0.0, _gen(seed))
        assert all(len(p) <= 1 for p in partners)
    # only rows that propose first are guaranteed their top choice; a lone proposer always is
    ucb[2, 0] = 0.1  # 2 now rejects 0: 0 falls through to its next best, 4 then 1 (tie 1/3)
    assert propose_reject(ucb, _only_row(c, 0), 1, TAU, 0.0, _gen(0))[0] == [4]


def test_epsilon_swap_picks_a_uniform_candidate() -> None:
    """kappa = 1, epsilon = 0.5, 5 candidates: top w.p. 0.5 + 0.5 / 5 = 0.6, each other 0.1."""
    c, n = 6, 1000
    ucb = torch.full((c, c), 0.9, dtype=torch.float64)
    ucb[0] = torch.tensor([0.0, 0.9, 0.8, 0.7, 0.6, 0.55], dtype=torch.float64)
    counts = Counter(propose_reject(ucb, _only_row(c, 0), 1, TAU, 0.5, _gen(s))[0][0] for s in range(n))
    assert abs(counts[1] / n - 0.6) < 0.05
    for j in range(2, c):
        assert abs(counts[j] / n - 0.1) < 0.04


def test_ties_are_broken_uniformly() -> None:
    c, n = 6, 600
    ucb = torch.full((c, c), 0.9, dtype=torch.float64)
    counts = Counter(propose_reject(ucb, _only_row(c, 0), 1, TAU, 0.0, _gen(s))[0][0] for s in range(n))
    assert set(counts) == {1, 2, 3, 4, 5}
    assert all(abs(k / n - 0.2) < 0.06 for k in counts.values())


@pytest.mark.parametrize("kappa", [1, 3])
def test_equal_scores_do_not_favour_low_ids(kappa: int) -> None:
    c, rounds = 100, 120
    total = torch.zeros(c)
    ucb = torch.full((c, c), 0.9, dtype=torch.float64)
    for r in range(rounds):
        g = _gen(r)
        half = torch.rand(c, c, generator=g) < 0.13
        cand = (half | half.T) & _all(c)  # about 25% of pairs
        partners = propose_reject(ucb, cand, kappa, TAU, 0.1, g)
        total += torch.tensor([len(p) for p in partners], dtype=torch.float32)
    mean = total / rounds
    low, high = mean[: c // 10].mean().item(), mean[-c // 10 :].mean().item()
    assert abs(low - high) < 0.06 * kappa, (low, high)


def test_invalid_arguments() -> None:
    u, cand = torch.zeros(3, 3), _all(3)
    with pytest.raises(ValueError, match="kappa"):
        propose_reject(u, cand, 0, TAU, 0.1, _gen(0))
    with pytest.raises(ValueError, match="epsilon"):
        propose_reject(u, cand, 1, TAU, 1.0, _gen(0))
    with pytest.raises(ValueError, match=r"\[C, C\]"):
        propose_reject(u, _all(4), 1, TAU, 0.1, _gen(0))
    with pytest.raises(ValueError, match="NaN"):
        propose_reject(torch.full((3, 3), float("nan")), cand, 1, TAU, 0.1, _gen(0))


def _reference_propose_reject(
    ucb: torch.Tensor,
    candidates: torch.Tensor,
    kappa: int,
    tau_acc: float,
    epsilon: float,
    generator: torch.Generator,
) -> list[list[int]]:
    """The implementation before issue 17 (all rows at once, one Python proposal loop), verbatim.

    Kept as the reference the blocked :func:`propose_reject` must reproduce bit for bit.
    """
    c = ucb.shape[0]
    ucb = ucb.detach().to("cpu", torch.float64)
    cand = candidates.to("cpu", torch.bool).clone().fill_diagonal_(False)
    order = torch.randperm(c, generator=generator)
    coin = torch.rand(c, generator=generator, dtype=torch.float64)
    pick = torch.rand(c, generator=generator, dtype=torch.float64)
    cycle = torch.randperm(c, generator=generator)
    start = torch.randint(0, max(c, 1), (c,), generator=generator)
    tie_order = cycle[(torch.arange(c)[None, :] + start[:, None]) % max(c, 1)]
    lowest = torch.finfo(ucb.dtype).min
    key = torch.where(cand, ucb.clamp(min=lowest), float("-inf")).gather(1, tie_order)
    ranked = tie_order.gather(1, torch.sort(key, dim=1, descending=True, stable=True).indices)
    size = cand.sum(1)
    swap = (coin < epsilon) & (size > 1)
    if bool(swap.any()):
        rows = swap.nonzero().reshape(-1)
        pos = (pick[rows] * size[rows]).long().clamp(max=size[rows] - 1)
        top, other = ranked[rows, 0].clone(), ranked[rows, pos].clone()
        ranked[rows, 0], ranked[rows, pos] = other, top
    in_list = torch.arange(c)[None, :] < size[:, None]
    accepts = ucb.transpose(0, 1) >= tau_acc
    keep = in_list & accepts.gather(1, ranked)
    flat = ranked[keep].tolist()
    ends = keep.sum(1).cumsum(0).tolist()
    starts = [0, *ends[:-1]]
    partners: list[set[int]] = [set() for _ in range(c)]
    for i in order.tolist():
        mine = partners[i]
        if len(mine) >= kappa:
            continue
        for j in flat[starts[i] : ends[i]]:
            if len(mine) >= kappa:
                break
            if j in mine or len(partners[j]) >= kappa:
                continue
            mine.add(j)
            partners[j].add(i)
    return [sorted(p) for p in partners]


def _instance(seed: int, c: int, density: float, ties: bool, down: float):
    """Random scores (rounded to 1 decimal when ``ties``: many equal scores, some below tau), a
    symmetric candidate mask of about ``density`` and an availability mask with ``down`` of the
    centers unavailable (applied as the selector applies it)."""
    g = _gen(1000 + seed)
    ucb = torch.rand(c, c, generator=g, dtype=torch.float64)
    if ties:
        ucb = ucb.round(decimals=1)
    half = torch.rand(c, c, generator=g) < density / 2
    cand = (half | half.T) & _all(c)
    up = torch.rand(c, generator=g) >= down
    return ucb, cand & up[None, :] & up[:, None]


@pytest.mark.parametrize("kappa", [1, 2, 3, 7])
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.6])
def test_blocked_matching_equals_the_reference(kappa: int, epsilon: float) -> None:
    """Identical partner sets for the same generator state on random instances: ties, epsilon swaps,
    filters of every density, unavailable centers, sizes across several proposer blocks."""
    for seed, (c, density, ties, down) in enumerate(
        [
            (5, 1.0, True, 0.0),
            (40, 0.5, True, 0.1),
            (90, 1.0, False, 0.0),
            (300, 0.3, True, 0.05),
            (600, 1.0, True, 0.0),
            (257, 0.05, False, 0.2),
            (513, 0.9, False, 0.0),
        ]
    ):
        ucb, cand = _instance(seed, c, density, ties, down)
        want = _reference_propose_reject(ucb, cand, kappa, TAU, epsilon, _gen(seed))
        assert propose_reject(ucb, cand, kappa, TAU, epsilon, _gen(seed)) == want, (c, density)


def test_blocked_matching_equals_the_reference_on_sparse_score_tables() -> None:
    """A :class:`SparseScores` table (prior score everywhere but on the observed pairs) matches the
    reference run on its dense matrix, at t = 1 (every score equal: all ties) and later."""
    from lightning_fed.selection.abps.policy import UCB
    from lightning_fed.selection.abps.posterior import BetaPosterior

    c = 700
    g = _gen(5)
    post = BetaPosterior(c)
    for r in range(3):
        i = torch.randint(0, c, (2000,), generator=g)
        j = (i + torch.randint(1, c, (2000,), generator=g)) % c
        keep = torch.unique(i * c + j)
        post.update(keep // c, keep % c, torch.rand(len(keep), generator=g, dtype=torch.float64))
        for t in (1, r + 2):
            table = UCB().pair_scores(post, t, torch.Generator())
            dense = table.dense()
            for kappa, epsilon in ((3, 0.1), (1, 0.1), (3, 0.0)):
                cand = _all(c)
                want = _reference_propose_reject(dense, cand, kappa, TAU, epsilon, _gen(10 * r + t))
                assert propose_reject(table, cand, kappa, TAU, epsilon, _gen(10 * r + t)) == want


def test_tau_above_every_score_leaves_everyone_resting_like_the_reference() -> None:
    ucb, cand = _instance(3, 120, 1.0, True, 0.0)
    for tau in (0.0, 0.95, 2.0):
        want = _reference_propose_reject(ucb, cand, 3, tau, 0.1, _gen(0))
        assert propose_reject(ucb, cand, 3, tau, 0.1, _gen(0)) == want
