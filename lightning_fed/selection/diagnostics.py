"""Mechanism diagnostics of partner selection: is selection learning, and why do centers rest?

The ABPS paper claims two mechanisms (Sec. 4.3, Lemma 1): the Bayesian UCB concentrates each center
on the peers that help it, and a center rests when no peer clears ``tau_acc``. These pure functions
measure both from one round's partner sets, so a run shows the mechanism instead of assuming it:

* :func:`repeat_edges`: how many of this round's partnerships also existed last round
  (``partner_repeat_rate``; a random rotating mesh repeats about ``kappa / |C_i|`` of them);
* :func:`posterior_mean_spread`: the mean over centers of the standard deviation of the posterior
  means over their candidates (how far beliefs have separated);
* :func:`same_group_slots`: on a federation whose centers carry a group (the synthetic care unit),
  how many partner slots join two centers of one group, against the count expected if partners were
  drawn uniformly from each center's candidates (``partner_same_unit_rate`` vs ``..._chance``);
* :func:`flagged_partner_slots`: on a federation where some centers are flagged (the mixed
  federation's off-concept centers), how many of the unflagged centers' partner slots go to a
  flagged center, against the count expected from uniform draws (``partner_off_concept_rate`` vs
  ``..._chance``);
* :func:`rest_causes`: why each resting center rests, one cause per center, so the four shares sum
  to the isolation rate:

  - ``unavailable``: the center was down (faults) this round;
  - ``no_candidates``: it had no candidate (filter, unpublished descriptor, every candidate down);
  - ``no_capacity``: some candidate would have accepted it on score, but every such candidate was
    full when it proposed, and it accepted nobody (the matching's capacity);
  - ``rejected``: no candidate's score on it cleared ``tau_acc`` and it accepted no proposal (with
    a mutual acceptance rule: no candidate passed both ends' tests): the Lemma 1 rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = [
    "REST_CAUSES",
    "MatchRecord",
    "MeanRows",
    "ScoreColumns",
    "flagged_partner_slots",
    "posterior_mean_spread",
    "repeat_edges",
    "rest_causes",
    "same_group_slots",
]

#: The causes of a rest, in the order they are tested.
REST_CAUSES: tuple[str, ...] = ("unavailable", "no_candidates", "no_capacity", "rejected")

#: Rows of a ``[C, C]`` input read at once.
BLOCK_ROWS = 256


@runtime_checkable
class ScoreColumns(Protocol):
    """A score table read by columns (:class:`~lightning_fed.selection.abps.policy.PairScores`)."""

    def cols(self, index: Tensor) -> Tensor:
        """``score[:, index]``, float64 ``[C, len(index)]``."""
        ...


@runtime_checkable
class MeanRows(Protocol):
    """Posterior means read by rows (:class:`~lightning_fed.selection.abps.posterior.BetaPosterior`)."""

    def mean_rows(self, index: Tensor) -> Tensor:
        """Means of rows ``index``, float64 ``[len(index), C]``."""
        ...


@dataclass(frozen=True)
class MatchRecord:
    """What a selector's matching saw in a round (kept by the selector for :func:`rest_causes`).

    Attributes:
        candidates: bool ``[C, C]``, who could propose to whom (after availability).
        scores: The scores the acceptance tested (``scores[j, i] >= tau_acc``: ``j`` accepts ``i``),
            a ``[C, C]`` matrix or a table with ``cols`` (:class:`ScoreColumns`), or None when
            acceptance does not depend on a score (everyone accepts).
        tau_acc: The acceptance threshold.
        mutual: Whether the proposer had to accept too (``scores[i, j] >= tau_acc``; an acceptance
            rule's matching): a center whose own scores refuse every candidate counts as
            ``rejected``. ``scores`` then needs ``rows`` as well (a matrix or a ``PairScores``).
    """

    candidates: Tensor
    scores: Tensor | ScoreColumns | None = None
    tau_acc: float = 0.0
    mutual: bool = False


def rest_causes(partners: list[list[int]], available: Tensor, match: MatchRecord | None) -> dict[str, int]:
    """Count resting centers by cause (module docstring), one cause each.

    Args:
        partners: This round's partner sets (empty = rests).
        available: bool ``[C]``, who was up this round.
        match: The selector's :class:`MatchRecord`; None (nothing recorded) counts every available
            rest as ``no_candidates``.

    Returns:
        ``{cause: count}`` over :data:`REST_CAUSES`.
    """
    resting = torch.tensor([not p for p in partners], dtype=torch.bool)
    available = available.to(torch.bool).reshape(-1)
    out = dict.fromkeys(REST_CAUSES, 0)
    out["unavailable"] = int((resting & ~available).sum())
    up = resting & available
    if match is None:
        out["no_candidates"] = int(up.sum())
        return out
    rows = torch.nonzero(up).reshape(-1)  # only the available resting centers' rows are read
    cand = match.candidates[rows].to("cpu", torch.bool) & available.unsqueeze(0)
    cand[torch.arange(len(rows)), rows] = False
    has = cand.any(1)
    out["no_candidates"] = int((~has).sum())
    if match.scores is None:
        accepts_me = cand
    else:  # accepts_me[b, j]: candidate j's score on rows[b] clears tau_acc
        if isinstance(match.scores, Tensor):
            on_me = match.scores.index_select(1, rows.to(match.scores.device)).to("cpu", torch.float64)
        else:
            on_me = match.scores.cols(rows)
        accepts_me = cand & (on_me.transpose(0, 1) >= match.tau_acc)
        if match.mutual:  # ... and rows[b] accepts candidate j
            if isinstance(match.scores, Tensor):
                mine = match.scores.index_select(0, rows.to(match.scores.device)).to("cpu", torch.float64)
            else:
                mine = match.scores.rows(rows)
            accepts_me &= mine >= match.tau_acc
    would = accepts_me.any(1)
    out["no_capacity"] = int((has & would).sum())
    out["rejected"] = int((has & ~would).sum())
    return out


def repeat_edges(partners: list[list[int]], previous: list[list[int]]) -> tuple[int, int]:
    """``(repeats, edges)``: undirected partnerships of this round, and how many existed last round."""
    now = {(min(i, j), max(i, j)) for i, ps in enumerate(partners) for j in ps}
    before = {(min(i, j), max(i, j)) for i, ps in enumerate(previous) for j in ps}
    return len(now & before), len(now)


def posterior_mean_spread(mean: Tensor | MeanRows, candidates: Tensor) -> float:
    """Mean over centers with >= 2 candidates of the std (ddof 0) of their posterior means over them.

    For center ``i`` with candidates ``C_i`` (``|C_i| >= 2``): ``mu_i = sum_{j in C_i} m_ij / |C_i|``,
    ``sd_i = sqrt(sum_{j in C_i} (m_ij - mu_i)^2 / |C_i|)``; the spread is the mean of ``sd_i``.

    Args:
        mean: Posterior means ``[C, C]`` (row ``i``: center ``i``'s beliefs), or an object that
            returns blocks of their rows (:class:`MeanRows`, e.g. the
            :class:`~lightning_fed.selection.abps.posterior.BetaPosterior` itself), read
            :data:`BLOCK_ROWS` rows at a time.
        candidates: bool ``[C, C]`` candidate sets.

    Returns:
        The spread (0.0 when no center has two candidates).
    """
    c = candidates.shape[0]
    sd = torch.zeros(c, dtype=torch.float64)
    eligible = torch.zeros(c, dtype=torch.bool)
    for lo in range(0, c, BLOCK_ROWS):
        index = torch.arange(lo, min(c, lo + BLOCK_ROWS))
        cand = candidates[index].to("cpu", torch.bool)
        cand[torch.arange(len(index)), index] = False
        size = cand.sum(1)
        eligible[index] = size >= 2
        m = mean[index].to("cpu", torch.float64) if isinstance(mean, Tensor) else mean.mean_rows(index)
        w = cand.to(torch.float64)
        mu = (m * w).sum(1) / size.clamp(min=1)
        var = (((m - mu[:, None]) ** 2) * w).sum(1) / size.clamp(min=1)
        sd[index] = var.sqrt()
    if not bool(eligible.any()):
        return 0.0
    return float(sd[eligible].mean())


def same_group_slots(partners: list[list[int]], candidates: Tensor, groups: Tensor) -> tuple[int, float, int]:
    """``(same, expected, slots)`` over the directed partner slots ``j in P_i`` of one round.

    ``same`` counts slots with ``group[j] == group[i]``; ``expected`` sums, over the same slots, the
    share of ``i``'s candidates in its own group (the rate if ``i`` drew its partners uniformly from
    ``C_i``), so ``same / slots`` against ``expected / slots`` is the same-group rate against chance.
    ``expected`` is summed slot by slot in partner order (a Python float sum).

    Args:
        partners: Partner sets.
        candidates: bool ``[C, C]`` the candidate sets the partners were drawn from.
        groups: int ``[C]`` group per center.
    """
    c = candidates.shape[0]
    groups = groups.to("cpu").reshape(-1)
    share = torch.zeros(c, dtype=torch.float64)
    for lo in range(0, c, BLOCK_ROWS):
        index = torch.arange(lo, min(c, lo + BLOCK_ROWS))
        cand = candidates[index].to("cpu", torch.bool)
        cand[torch.arange(len(index)), index] = False
        same_mask = groups[index, None] == groups[None, :]
        own = (cand & same_mask).sum(1).to(torch.float64)
        share[index] = own / cand.sum(1).clamp(min=1).to(torch.float64)
    dst = torch.tensor([i for i, ps in enumerate(partners) for _ in ps], dtype=torch.int64)
    src = torch.tensor([j for ps in partners for j in ps], dtype=torch.int64)
    same = int((groups[dst] == groups[src]).sum())
    expected = 0.0
    for value in share[dst].tolist():
        expected += value
    return same, expected, len(dst)


def flagged_partner_slots(
    partners: list[list[int]], candidates: Tensor, flagged: Tensor
) -> tuple[int, float, int]:
    """``(hits, expected, slots)`` over the directed slots ``j in P_i`` of unflagged receivers ``i``.

    ``hits`` counts slots with ``flagged[j]``; ``expected`` sums, over the same slots, the share of
    flagged centers among ``i``'s candidates (the rate if ``i`` drew uniformly from ``C_i``), so
    ``hits / slots`` against ``expected / slots`` is the rate of partnerships with flagged centers
    against chance, seen from the unflagged side (on the mixed federation: the in-concept centers'
    partnerships with off-concept ones). It is :func:`same_group_slots` with the flag as the group,
    restricted to unflagged receivers: a slot is a hit iff it is not same-group.

    Args:
        partners: Partner sets.
        candidates: bool ``[C, C]`` the candidate sets the partners were drawn from.
        flagged: bool ``[C]``.
    """
    flagged = flagged.to("cpu", torch.bool).reshape(-1)
    kept = [ps if not flagged[i] else [] for i, ps in enumerate(partners)]
    same, expected, slots = same_group_slots(kept, candidates, flagged.to(torch.int64))
    return slots - same, slots - expected, slots
