"""Goal-aware metadata pre-filter (ABPS Sec. 4.1, Eq. 3; Algorithm 1 line 12).

Each center ``i`` publishes a metadata descriptor ``v_i`` (coordinate 0 is the positive-class rate,
the KPI marker) and scores every peer with its goal's admission rule

* ``"homogeneity"``: ``f_i(v_i, v_j) = cos(v_i, v_j)``,
* ``"diversity"``:   ``f_i(v_i, v_j) = -cos(v_i, v_j)``,
* ``"alignment"``:   ``f_i(v_i, v_j) = -|v_i0 - v_j0|``.

Peer ``j`` enters the candidate set ``C_i`` iff ``f_i(v_i, v_j) >= tau_sim``. The three rules live on
different scales, so ``tau_sim`` can instead be calibrated from a keep fraction ``rho`` (the paper:
25 %), in one of two ways (``keep``):

* ``"per_center"`` (the paper's presets, Sec. 5.4 and 6.5: ``|C_i| ~ rho (n - 1)``): every center
  ``i`` keeps its own ``k = ceil(rho (n - 1))`` best-scoring peers (its own ``tau_sim``, the
  ``k``-th best score; ties broken towards lower ids by a stable sort). These top-``k`` sets are not
  symmetric (``j`` may be among ``i``'s best while ``i`` is not among ``j``'s), and the matching
  lets ``i`` propose only to ``C_i`` while ``j`` accepts on score alone, so the sets are symmetrized
  by union, ``C_i <- C_i | {j : i in C_j}``: every center keeps at least its ``k`` (no center is
  emptied, as an intersection would empty the peers nobody ranks highly) and at most ``n - 1``.
* ``"global"``: one threshold, the ``1 - rho`` quantile of all ``n (n - 1)`` pair scores, so about
  ``rho`` of all pairs pass. Symmetric rules give symmetric sets, but their sizes are uneven:
  measured on the 230-center synthetic federation (homogeneity, 15 dims) ``|C_i|`` ranged 0-138,
  and the diversity goal concentrates its pairs on a few hub centers.

Only descriptors that reached the directory count: :func:`candidate_mask` takes a ``published``
mask, leaves a center whose descriptor has not arrived out of every candidate set (with none of its
own) and calibrates ``tau_sim`` over the published pairs only, so the sets change (and are
recomputed by the caller) when a late descriptor arrives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.selection.base import SELECTOR_KEY, CandidateFilter

__all__ = [
    "GOALS",
    "KEEP_MODES",
    "GoalFilter",
    "calibrate_threshold",
    "candidate_mask",
    "goal_scores",
    "top_k_mask",
]

#: How a keep fraction calibrates ``tau_sim`` (module docstring).
#: Where a goal filter's arguments live in a config (the prefix its errors name).
FILTER_KEY = f"{SELECTOR_KEY}.filter.init_args"

KEEP_MODES: tuple[str, ...] = ("per_center", "global")

#: Rows sorted at once by :func:`top_k_mask` (its per-row sorts need no ``[C, C]`` index matrix).
_BLOCK_ROWS = 256


def _cosine(meta: Tensor) -> Tensor:
    """Pairwise cosine similarity ``[C, C]``; a zero descriptor has cosine 0 with everything."""
    norms = meta.norm(dim=1, keepdim=True)
    unit = meta / torch.where(norms > 0, norms, torch.ones_like(norms))
    return unit @ unit.T


def _homogeneity(meta: Tensor) -> Tensor:
    return _cosine(meta)


def _diversity(meta: Tensor) -> Tensor:
    return -_cosine(meta)


def _alignment(meta: Tensor) -> Tensor:
    rate = meta[:, 0]
    return -(rate[:, None] - rate[None, :]).abs()


#: Admission rule of each collaboration goal (the config's enum): ``meta [C, d] -> f [C, C]``.
GOALS: dict[str, Callable[[Tensor], Tensor]] = {
    "homogeneity": _homogeneity,
    "diversity": _diversity,
    "alignment": _alignment,
}


def goal_scores(meta: Tensor, goal: str) -> Tensor:
    """Pairwise admission scores ``f_i(v_i, v_j)`` of Eq. 3.

    Args:
        meta: Metadata descriptors ``[C, d]`` (coordinate 0 = positive-class rate).
        goal: One of :data:`GOALS`.

    Returns:
        float64 ``[C, C]``, row ``i`` = center ``i``'s scores of its peers; the diagonal is ``-inf``
        (a center is never its own candidate).

    Raises:
        ValueError: On an unknown goal or a descriptor that is not ``[C, d]`` with ``d >= 1``.
    """
    if goal not in GOALS:
        raise ValueError(f"unknown goal {goal!r}; allowed goals: {', '.join(sorted(GOALS))}")
    if meta.dim() != 2 or meta.shape[1] < 1:
        raise ValueError(f"metadata must be [C, d] with d >= 1, got {list(meta.shape)}")
    scores = GOALS[goal](meta.to(torch.float64))  # a fresh [C, C] matrix (no copy of it is kept)
    scores.fill_diagonal_(float("-inf"))
    return scores


def calibrate_threshold(scores: Tensor, keep_fraction: float) -> float:
    """``tau_sim`` that keeps ``keep_fraction`` of the off-diagonal pairs (the paper's 25% rule).

    The threshold is the ``1 - keep_fraction`` quantile (linear interpolation) of the ``C (C - 1)``
    off-diagonal scores, so ``scores >= tau`` holds for about ``keep_fraction`` of them (more when
    scores tie at the threshold; every pair when ``keep_fraction = 1``).

    Args:
        scores: ``[C, C]`` from :func:`goal_scores` (the diagonal is ignored).
        keep_fraction: Fraction of pairs to keep, in ``(0, 1]``.

    Raises:
        ValueError: If ``keep_fraction`` is outside ``(0, 1]`` or there are fewer than 2 centers.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    c = scores.shape[0]
    if scores.dim() != 2 or scores.shape[1] != c or c < 2:
        raise ValueError(f"scores must be [C, C] with C >= 2, got {list(scores.shape)}")
    off = scores[~torch.eye(c, dtype=torch.bool, device=scores.device)].to(torch.float64)
    return float(torch.quantile(off, 1.0 - keep_fraction))


def top_k_mask(scores: Tensor, keep_fraction: float) -> Tensor:
    """Each row's ``k = ceil(keep_fraction (C - 1))`` best off-diagonal scores, before symmetrization.

    Args:
        scores: ``[C, C]`` from :func:`goal_scores` (diagonal ``-inf``).
        keep_fraction: ``rho`` in ``(0, 1]``.

    Returns:
        bool ``[C, C]`` with exactly ``k`` True per row (ties at the ``k``-th score towards lower ids).
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    c = scores.shape[0]
    k = min(c - 1, math.ceil(keep_fraction * (c - 1) - 1e-9))
    mask = torch.zeros(c, c, dtype=torch.bool, device=scores.device)
    if k <= 0:
        return mask
    for lo in range(0, c, _BLOCK_ROWS):  # each row's stable sort on its own: no [C, C] sort output
        order = torch.sort(scores[lo : lo + _BLOCK_ROWS], dim=1, descending=True, stable=True).indices[:, :k]
        mask[lo : lo + _BLOCK_ROWS].scatter_(1, order, True)
    return mask.fill_diagonal_(False)


def candidate_mask(
    meta: Tensor,
    goal: str,
    tau_sim: float | None = None,
    keep_fraction: float | None = None,
    published: Tensor | None = None,
    keep: str = "per_center",
) -> Tensor:
    """Candidate sets ``C_i = {j != i : f_i(v_i, v_j) >= tau_sim}`` as a boolean matrix.

    Args:
        meta: Metadata descriptors ``[C, d]``.
        goal: One of :data:`GOALS` (validated even when nothing is filtered).
        tau_sim: A fixed threshold, or ``None``.
        keep_fraction: When given, ``tau_sim`` is calibrated from it as ``keep`` says (``tau_sim``
            must then be ``None``). With both ``None`` nothing is filtered: every ``j != i`` is a
            candidate.
        published: Optional bool ``[C]``: whose descriptor has arrived. The others' rows of ``meta``
            are ignored: they are in no candidate set and have none, and ``tau_sim`` is calibrated
            over the published pairs only (the mask is the published subset's mask, embedded). With
            fewer than two published nobody has a candidate. ``None`` = all published.
        keep: ``"per_center"`` (each center's top ``ceil(rho (n - 1))``, symmetrized by union) or
            ``"global"`` (one quantile over all pairs, :func:`calibrate_threshold`); see the module
            docstring.

    Returns:
        bool ``[C, C]``, ``mask[i, j]`` iff ``j`` is in ``C_i``; the diagonal is ``False``.

    Raises:
        ValueError: If both ``tau_sim`` and ``keep_fraction`` are given, on an unknown goal, or on a
            ``published`` that is not a bool ``[C]``.
    """
    if tau_sim is not None and keep_fraction is not None:
        raise ValueError("give tau_sim or keep_fraction, not both")
    scores = goal_scores(meta, goal)
    if published is not None:
        c = scores.shape[0]
        if not isinstance(published, Tensor) or published.dtype != torch.bool or published.shape != (c,):
            got = f"{published.dtype} {list(published.shape)}" if isinstance(published, Tensor) else published
            raise ValueError(f"published must be a bool [{c}] mask (one entry per center), got {got!r}")
        if not bool(published.all()):
            mask = torch.zeros(c, c, dtype=torch.bool, device=scores.device)
            idx = torch.nonzero(published.to(scores.device)).reshape(-1)
            if idx.numel() >= 2:
                mask[idx.unsqueeze(1), idx] = candidate_mask(
                    meta[idx], goal, tau_sim, keep_fraction, keep=keep
                )
            return mask
    if keep not in KEEP_MODES:
        raise ValueError(f"{FILTER_KEY}.keep must be one of {', '.join(KEEP_MODES)}, got {keep!r}")
    if keep_fraction is not None and keep == "per_center":
        top = top_k_mask(scores, keep_fraction)
        return top | top.T
    if keep_fraction is not None:
        tau_sim = calibrate_threshold(scores, keep_fraction)
    mask = torch.ones_like(scores, dtype=torch.bool) if tau_sim is None else scores >= tau_sim
    return mask.fill_diagonal_(False)


class GoalFilter(CandidateFilter):
    """Goal-aware metadata pre-filter (ABPS Sec. 4.1, Eq. 3).

    Args:
        goal: ``"homogeneity"``, ``"diversity"`` or ``"alignment"``.
        tau_sim: Fixed admission threshold on ``f_i(v_i, v_j)``; mutually exclusive with
            ``keep_fraction``.
        keep_fraction: Calibrate ``tau_sim`` from this keep fraction ``rho`` (paper: 0.25).
        metadata_dim: Descriptor entries used: 3 (base) or 15 (with the 12 Charlson prevalences).
        keep: How ``keep_fraction`` calibrates: ``"per_center"`` (every center keeps its own
            ``ceil(rho (n - 1))`` best peers, symmetrized by union; the paper's presets) or
            ``"global"`` (one quantile over all pairs; before issue 14 the only mode). See
            :mod:`~lightning_fed.selection.abps.filter`.
    """

    def __init__(
        self,
        goal: str = "homogeneity",
        tau_sim: float | None = None,
        keep_fraction: float | None = 0.25,
        metadata_dim: int = 3,
        keep: str = "per_center",
    ) -> None:
        if keep not in KEEP_MODES:
            raise ValueError(f"{FILTER_KEY}.keep must be one of {', '.join(KEEP_MODES)}, got {keep!r}")
        if goal not in GOALS:
            raise ValueError(f"{FILTER_KEY}.goal must be one of {sorted(GOALS)}, got {goal!r}")
        if tau_sim is not None and keep_fraction is not None:
            raise ValueError(
                f"{FILTER_KEY}: give either tau_sim or keep_fraction, not both (set the other to null)"
            )
        if keep_fraction is not None and not 0.0 < keep_fraction <= 1.0:
            raise ValueError(f"{FILTER_KEY}.keep_fraction must be in (0, 1], got {keep_fraction}")
        if metadata_dim < 1:
            raise ValueError(f"{FILTER_KEY}.metadata_dim must be >= 1, got {metadata_dim}")
        self.goal, self.tau_sim, self.keep_fraction = goal, tau_sim, keep_fraction
        self.metadata_dim = int(metadata_dim)
        self.keep = keep

    def candidates(self, metadata: Tensor, published: Tensor | None = None) -> Tensor:
        """``C_i`` for every center as a bool ``[C, C]`` matrix (False on the diagonal).

        Args:
            metadata: Descriptors ``[C, d]`` with ``d >= metadata_dim``.
            published: Optional bool ``[C]``, whose descriptor has arrived (see
                :func:`~lightning_fed.selection.abps.filter.candidate_mask`); None = everyone's.
        """
        if metadata.shape[1] < self.metadata_dim:
            raise ValueError(
                f"{FILTER_KEY}.metadata_dim={self.metadata_dim} but the data's descriptors have "
                f"{metadata.shape[1]} entries"
            )
        return candidate_mask(
            metadata[:, : self.metadata_dim],
            self.goal,
            self.tau_sim,
            self.keep_fraction,
            published,
            self.keep,
        )
