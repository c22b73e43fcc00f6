"""Propose-reject matching with an explicit rest action (ABPS Sec. 4.3; Algorithm 1 lines 13-22).

Every round each center ``i`` ranks its candidates ``C_i`` by descending ``UCB_{j->i}``, and with
probability ``epsilon`` swaps the top-ranked candidate with a uniformly random one of ``C_i``
(line 14). It then proposes down that list until it holds ``kappa`` partners or the list is
exhausted; peer ``j`` accepts iff its own score on ``i`` clears the threshold,
``UCB_{i->j} >= tau_acc``, and it still has a free slot, ``|P_j| < kappa`` (line 19). An accepted
proposal links both ways (line 20). A center whose proposals all fail and whom nobody accepted
*rests*: ``P_i`` is empty and it exchanges nothing this round (Lemma 1).

Two sources of order are randomized, both drawn from ``generator`` every round, because a fixed
id order would systematically favour low ids:

* proposal order: centers propose in a uniformly random order (under a fixed order, low ids would
  fill their ``kappa`` slots first and leave high ids the leftovers);
* ties in UCB: each center breaks ties by its own random cyclic order of the peers (one random
  permutation, each center starting at its own random offset), so among equal UCBs every peer is
  equally likely to come first. Ties are the common case, not an edge case: at ``t = 1`` every UCB
  equals the prior mean, and every peer a center has never observed keeps the same UCB. Breaking
  them by id would send the first proposals of every center to the lowest ids (measured on 100
  centers, equal UCBs, ``kappa = 3``, about 25% of pairs as candidates: the last 10% of ids
  averaged 2.66 partners against 3.0 for the first 10%; a fixed proposal order alone gives 2.70).

Both are deterministic given the generator, so a run seed reproduces every matching.

Partners gained by being accepted count towards a center's ``kappa`` when its own turn comes
(Algorithm 1 line 15 resets ``P_i`` per proposer, which would drop links already made symmetric;
we keep them, as line 20 intends). The proposer does not test its own UCB: a center that rates
every peer below ``tau_acc`` still proposes, and pairs with any peer that rates *it* high enough.
So a center rests only when every candidate rejects it (or is full) and it rejects, or is not
reached by, every proposal made to it.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["propose_reject"]


def _ranked_candidates(ucb: Tensor, candidates: Tensor, tie_order: Tensor) -> Tensor:
    """Per row: candidate ids by descending UCB, ties in ``tie_order``, non-candidates last.

    ``tie_order[i]`` is the order in which row ``i`` visits the columns; a stable sort of the
    scores taken in that order keeps it among equal scores.
    """
    lowest = torch.finfo(ucb.dtype).min  # a candidate scored -inf still ranks above non-candidates
    key = torch.where(candidates, ucb.clamp(min=lowest), float("-inf")).gather(1, tie_order)
    return tie_order.gather(1, torch.sort(key, dim=1, descending=True, stable=True).indices)


def propose_reject(
    ucb: Tensor,
    candidates: Tensor,
    kappa: int,
    tau_acc: float,
    epsilon: float,
    generator: torch.Generator,
) -> list[list[int]]:
    """One round of Algorithm 1 lines 13-22: who exchanges with whom.

    Random draws (all from ``generator``, the same number every call whatever the outcome): the
    proposal order (a permutation of the centers); per center, one uniform for the ``epsilon`` coin
    and one that picks the swap partner, the ``floor(u |C_i|)``-th candidate of the ranking
    (possibly the top one itself: a no-op swap); the tie-break order (a permutation and a start
    offset per center). The swap exchanges the positions of the two candidates in ``i``'s list.
    With ``epsilon = 0`` and distinct scores, each center's ranking is a deterministic function of
    the UCBs; only the proposal order is random.

    Args:
        ucb: ``[C, C]`` with ``ucb[i, j] = UCB_{j->i}``, center ``i``'s score for peer ``j`` (Eq. 7).
            Ranking uses row ``i``; ``j`` decides on ``i``'s proposal with ``ucb[j, i]``.
        candidates: bool ``[C, C]``, ``candidates[i, j]`` iff ``j`` is in ``C_i`` (the diagonal is
            ignored). ``i`` only proposes to its candidates; acceptance does not require ``i`` to be
            in ``C_j`` (line 19), which makes no difference for the symmetric filters of Eq. 3.
        kappa: Maximum partners per center, ``>= 1``.
        tau_acc: Acceptance threshold on the receiver's UCB (paper: 0.5).
        epsilon: Probability of the exploration swap, in ``[0, 1)``.
        generator: Source of every random draw (derive it from ``(seed, purpose, round)``).

    Returns:
        Partner lists ``P_i`` (ascending ids), symmetric: ``j in P[i]`` iff ``i in P[j]``; an empty
        list means center ``i`` rests.

    Raises:
        ValueError: On bad shapes, NaN scores, ``kappa < 1`` or ``epsilon`` outside ``[0, 1)``.
    """
    if kappa < 1:
        raise ValueError(f"kappa must be >= 1, got {kappa}")
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
    c = ucb.shape[0]
    if ucb.dim() != 2 or ucb.shape != (c, c) or candidates.shape != (c, c):
        raise ValueError(
            f"ucb and candidates must be [C, C], got {list(ucb.shape)}, {list(candidates.shape)}"
        )
    ucb = ucb.detach().to("cpu", torch.float64)
    if bool(torch.isnan(ucb).any()):
        raise ValueError("ucb contains NaN")
    cand = candidates.to("cpu", torch.bool).clone().fill_diagonal_(False)

    order = torch.randperm(c, generator=generator)
    coin = torch.rand(c, generator=generator, dtype=torch.float64)
    pick = torch.rand(c, generator=generator, dtype=torch.float64)
    cycle = torch.randperm(c, generator=generator)
    start = torch.randint(0, max(c, 1), (c,), generator=generator)

    tie_order = cycle[(torch.arange(c)[None, :] + start[:, None]) % max(c, 1)]
    ranked = _ranked_candidates(ucb, cand, tie_order)  # [C, C]: the first |C_i| entries of row i are C_i
    size = cand.sum(1)
    swap = (coin < epsilon) & (size > 1)
    if bool(swap.any()):  # line 14: exchange positions 0 and floor(pick * |C_i|)
        rows = swap.nonzero().reshape(-1)
        pos = (pick[rows] * size[rows]).long().clamp(max=size[rows] - 1)
        top, other = ranked[rows, 0].clone(), ranked[rows, pos].clone()
        ranked[rows, 0], ranked[rows, pos] = other, top

    # Keep, per proposer, only candidates that would accept it on score (ucb[j, i] >= tau_acc); the
    # capacity test |P_j| < kappa depends on earlier proposals and stays in the loop.
    in_list = torch.arange(c)[None, :] < size[:, None]
    accepts = ucb.transpose(0, 1) >= tau_acc  # accepts[i, j]: j's score on i clears tau_acc
    would_accept = accepts.gather(1, ranked)
    keep = in_list & would_accept
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
