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
* :func:`rest_causes`: why each resting center rests, one cause per center, so the four shares sum
  to the isolation rate:

  - ``unavailable``: the center was down (faults) this round;
  - ``no_candidates``: it had no candidate (filter, unpublished descriptor, every candidate down);
  - ``no_capacity``: some candidate would have accepted it on score, but every such candidate was
    full when it proposed, and it accepted nobody (the matching's capacity);
  - ``rejected``: no candidate's score on it cleared ``tau_acc`` and it accepted no proposal: the
    Lemma 1 rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "REST_CAUSES",
    "MatchRecord",
    "posterior_mean_spread",
    "repeat_edges",
    "rest_causes",
    "same_group_slots",
]

#: The causes of a rest, in the order they are tested.
REST_CAUSES: tuple[str, ...] = ("unavailable", "no_candidates", "no_capacity", "rejected")


@dataclass(frozen=True)
class MatchRecord:
    """What a selector's matching saw in a round (kept by the selector for :func:`rest_causes`).

    Attributes:
        candidates: bool ``[C, C]``, who could propose to whom (after availability).
        scores: ``[C, C]`` scores the acceptance tested (``scores[j, i] >= tau_acc``: ``j`` accepts
            ``i``), or None when acceptance does not depend on a score (everyone accepts).
        tau_acc: The acceptance threshold.
    """

    candidates: Tensor
    scores: Tensor | None = None
    tau_acc: float = 0.0


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
    cand = match.candidates.to(torch.bool).clone()
    cand.fill_diagonal_(False)
    cand &= available.unsqueeze(0) & available.unsqueeze(1)
    has = cand.any(1)
    out["no_candidates"] = int((up & ~has).sum())
    if match.scores is None:
        accepts_me = cand
    else:  # accepts_me[i, j]: candidate j's score on i clears tau_acc
        accepts_me = cand & (match.scores.transpose(0, 1).to(torch.float64) >= match.tau_acc)
    would = accepts_me.any(1)
    out["no_capacity"] = int((up & has & would).sum())
    out["rejected"] = int((up & has & ~would).sum())
    return out


def repeat_edges(partners: list[list[int]], previous: list[list[int]]) -> tuple[int, int]:
    """``(repeats, edges)``: undirected partnerships of this round, and how many existed last round."""
    now = {(min(i, j), max(i, j)) for i, ps in enumerate(partners) for j in ps}
    before = {(min(i, j), max(i, j)) for i, ps in enumerate(previous) for j in ps}
    return len(now & before), len(now)


def posterior_mean_spread(mean: Tensor, candidates: Tensor) -> float:
    """Mean over centers with >= 2 candidates of the std (ddof 0) of their posterior means over them.

    Args:
        mean: Posterior means ``[C, C]`` (row ``i``: center ``i``'s beliefs).
        candidates: bool ``[C, C]`` candidate sets.

    Returns:
        The spread (0.0 when no center has two candidates).
    """
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


def same_group_slots(partners: list[list[int]], candidates: Tensor, groups: Tensor) -> tuple[int, float, int]:
    """``(same, expected, slots)`` over the directed partner slots ``j in P_i`` of one round.

    ``same`` counts slots with ``group[j] == group[i]``; ``expected`` sums, over the same slots, the
    share of ``i``'s candidates in its own group (the rate if ``i`` drew its partners uniformly from
    ``C_i``), so ``same / slots`` against ``expected / slots`` is the same-group rate against chance.

    Args:
        partners: Partner sets.
        candidates: bool ``[C, C]`` the candidate sets the partners were drawn from.
        groups: int ``[C]`` group per center.
    """
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
