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
With an acceptance rule (``accept``, ``mutual=True``: :mod:`~lightning_fed.selection.abps.rest`)
the proposer does test it: a pair forms only when both ends accept, so a center that accepts no
candidate rests whatever the others think of it.

Implementation (issue 17). The proposals are processed in blocks of :data:`BLOCK_ROWS` proposers,
in the proposal order: for a block, only the proposers that still have a free slot get their
ranking (a ``[B, C]`` stable sort of their scores in their tie order), their epsilon swap and their
acceptance mask (the block's columns of the score table); each proposer then takes, at its turn,
the first ``kappa - |P_i|`` peers of its accepting list that are not full and not yet its partners,
which is what the one-proposal-at-a-time loop of lines 15-21 does (a proposal changes only the
proposer's and the accepting peer's counts, and a peer occurs once in a list). No ``[C, C]`` ranking,
score or index matrix is built, and a proposer that is full before its block is never ranked. The
random draws are the ones listed in :func:`propose_reject`, drawn up front, so the partner sets are
those of the former all-rows implementation bit for bit (``tests/selection/test_matching.py``
compares the two on random instances).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lightning_fed.selection.abps.policy import DenseScores, PairScores

__all__ = ["BLOCK_ROWS", "propose_reject"]

#: Proposers ranked at once (a block's ranking is a ``[BLOCK_ROWS, C]`` sort).
BLOCK_ROWS = 256


def _ranked_candidates(ucb: Tensor, candidates: Tensor, tie_order: Tensor) -> Tensor:
    """Per row: candidate ids by descending UCB, ties in ``tie_order``, non-candidates last.

    ``tie_order[i]`` is the order in which row ``i`` visits the columns; a stable sort of the
    scores taken in that order keeps it among equal scores.
    """
    lowest = torch.finfo(ucb.dtype).min  # a candidate scored -inf still ranks above non-candidates
    key = torch.where(candidates, ucb.clamp(min=lowest), float("-inf")).gather(1, tie_order)
    return tie_order.gather(1, torch.sort(key, dim=1, descending=True, stable=True).indices)


def propose_reject(
    ucb: Tensor | PairScores,
    candidates: Tensor,
    kappa: int,
    tau_acc: float,
    epsilon: float,
    generator: torch.Generator,
    accept: Tensor | PairScores | None = None,
    mutual: bool = False,
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
        ucb: ``[C, C]`` with ``ucb[i, j] = UCB_{j->i}``, center ``i``'s score for peer ``j`` (Eq. 7),
            as a matrix or a :class:`~lightning_fed.selection.abps.policy.PairScores` table.
            Ranking uses row ``i``; ``j`` decides on ``i``'s proposal with ``ucb[j, i]``.
        candidates: bool ``[C, C]``, ``candidates[i, j]`` iff ``j`` is in ``C_i`` (the diagonal is
            ignored). ``i`` only proposes to its candidates; acceptance does not require ``i`` to be
            in ``C_j`` (line 19), which makes no difference for the symmetric filters of Eq. 3.
        kappa: Maximum partners per center, ``>= 1``.
        tau_acc: Acceptance threshold on the receiver's UCB (paper: 0.5).
        epsilon: Probability of the exploration swap, in ``[0, 1)``.
        generator: Source of every random draw (derive it from ``(seed, purpose, round)``).
        accept: The acceptance table tested against ``tau_acc`` (``accept[j, i] >= tau_acc``: ``j``
            accepts ``i``), when it is not ``ucb`` itself (an
            :class:`~lightning_fed.selection.abps.rest.AcceptanceRule`'s); None: ``ucb`` (line 19).
        mutual: Whether the proposer tests it too: ``i`` proposes to ``j`` only if
            ``accept[i, j] >= tau_acc``, and accepts ``j``'s proposal only if ``j`` passes both
            ends' tests (a center that accepts no candidate pairs with nobody: Lemma 1's rest on
            its own beliefs).

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
    if isinstance(ucb, PairScores):
        scores, shape = ucb, (ucb.num_centers, ucb.num_centers)
    else:
        shape = tuple(ucb.shape)
    c = shape[0] if shape else 0
    if len(shape) != 2 or shape != (c, c) or candidates.shape != (c, c):
        raise ValueError(f"ucb and candidates must be [C, C], got {list(shape)}, {list(candidates.shape)}")
    if not isinstance(ucb, PairScores):
        scores = DenseScores(ucb)
    if scores.has_nan():
        raise ValueError("ucb contains NaN")
    if accept is None:
        acceptance = scores
    else:
        acceptance = accept if isinstance(accept, PairScores) else DenseScores(accept)
        if acceptance.num_centers != c or acceptance.has_nan():
            raise ValueError(f"accept must be a [{c}, {c}] table without NaN")
    cand = candidates.to("cpu", torch.bool).clone().fill_diagonal_(False)

    order = torch.randperm(c, generator=generator)
    coin = torch.rand(c, generator=generator, dtype=torch.float64)
    pick = torch.rand(c, generator=generator, dtype=torch.float64)
    cycle = torch.randperm(c, generator=generator)
    start = torch.randint(0, max(c, 1), (c,), generator=generator)

    size = cand.sum(1)
    swap = (coin < epsilon) & (size > 1)
    swap_pos = (pick * size).long().clamp(max=size - 1)  # line 14: the swap partner's position
    degree = np.zeros(c, dtype=np.int64)
    partners = np.full((c, max(1, min(kappa, c - 1))), -1, dtype=np.int64)
    size_np, positions = size.numpy(), torch.arange(c)
    for lo in range(0, c, BLOCK_ROWS):
        block = order[lo : lo + BLOCK_ROWS]
        block_np = block.numpy()
        rows = block[torch.from_numpy((degree[block_np] < kappa) & (size_np[block_np] > 0))]
        if not len(rows):
            continue
        tie_order = cycle[(positions[None, :] + start[rows, None]) % c]
        ranked = _ranked_candidates(scores.rows(rows), cand[rows], tie_order)
        swapping = torch.nonzero(swap[rows]).reshape(-1)
        if len(swapping):  # exchange positions 0 and floor(pick * |C_i|)
            pos = swap_pos[rows[swapping]]
            top, other = ranked[swapping, 0].clone(), ranked[swapping, pos].clone()
            ranked[swapping, 0], ranked[swapping, pos] = other, top
        # Keep only candidates that would accept the proposer on score (ucb[j, i] >= tau_acc); the
        # capacity test |P_j| < kappa depends on earlier proposals and is made at the proposer's turn.
        accepts = acceptance.cols(rows).transpose(0, 1) >= tau_acc  # [b, j]: j accepts rows[b] on score
        if mutual:  # ... and rows[b] itself accepts j
            accepts &= acceptance.rows(rows) >= tau_acc
        keep = (positions[None, :] < size[rows, None]) & accepts.gather(1, ranked)
        ranked_np, keep_np = ranked.numpy(), keep.numpy()
        for b, i in enumerate(rows.tolist()):
            need = kappa - degree[i]
            if need <= 0:
                continue
            wanted = ranked_np[b][keep_np[b]]  # i's accepting candidates, in proposal order
            free = degree[wanted] < kappa
            if degree[i]:
                free &= ~np.isin(wanted, partners[i, : degree[i]])
            taken = wanted[np.flatnonzero(free)[:need]]
            if not len(taken):
                continue
            partners[i, degree[i] : degree[i] + len(taken)] = taken
            degree[i] += len(taken)
            partners[taken, degree[taken]] = i
            degree[taken] += 1
    return [sorted(row[:d].tolist()) for row, d in zip(partners, degree.tolist(), strict=True)]
