"""Exact, batched binary AUROC: per-row, per-center and pooled.

AUROC is computed with the Mann-Whitney rank formula. For one group with ``P`` positives and
``N`` negatives and average ranks ``r_i`` (ties share the mean of the ranks they span),

    AUROC = (sum_{i positive} r_i - P (P + 1) / 2) / (P N),

which equals ``sklearn.metrics.roc_auc_score`` (trapezoidal ROC area) exactly, ties included.
A group with only one class (``P == 0`` or ``N == 0``) has no defined AUROC: the result is NaN,
never 0.0 or 0.5 (torchmetrics returns 0.0 there, which silently biases means over centers).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["batched_auroc", "fragile_auroc", "pooled_auroc"]


def _check_binary(name: str, values: Tensor, where: Tensor | None = None) -> None:
    sel = values if where is None else values[where]
    if sel.numel() and not bool(((sel == 0) | (sel == 1)).all()):
        raise ValueError(f"`{name}` must contain only 0/1 values")


def batched_auroc(scores: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:
    """Exact AUROC of every row of a padded ``[C, n]`` batch, without a Python loop over rows.

    Padded entries (``mask == False``) are set to ``+inf`` so they sort after every real score and
    never count as smaller than one. With each row sorted, the average rank of a real score ``x``
    is ``(#{< x} + #{<= x} + 1) / 2``, both counts found by ``torch.searchsorted`` (``side='left'``
    and ``side='right'``); then ``AUROC = (R_pos - P (P + 1) / 2) / (P N)`` with ``R_pos`` the sum
    of the positives' ranks. Everything is computed in float64.

    Args:
        scores: ``[C, n]`` real-valued scores (probabilities or logits; only their order matters).
            Scores of real entries must be finite; padded entries may hold anything.
        targets: ``[C, n]`` binary labels (0/1, bool, int or float).
        mask: Optional ``[C, n]`` bool, ``True`` for real entries. ``None`` means all are real.

    Returns:
        float64 ``[C]`` tensor on the scores' device: each row's AUROC, NaN where the row's real
        entries hold a single class or none at all.

    Raises:
        ValueError: On wrong shapes, a non-bool mask, non-binary targets or non-finite scores.
    """
    if scores.ndim != 2:
        raise ValueError(f"`scores` must have shape [C, n], got {tuple(scores.shape)}")
    if targets.shape != scores.shape:
        raise ValueError(
            f"`targets` must have the shape of `scores` {tuple(scores.shape)}, got {tuple(targets.shape)}"
        )
    if mask is None:
        mask = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    elif mask.dtype != torch.bool or mask.shape != scores.shape:
        raise ValueError(
            f"`mask` must be a bool tensor of shape {tuple(scores.shape)}, "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    if scores.is_complex() or scores.dtype == torch.bool:
        raise ValueError(f"`scores` must be real-valued, got {scores.dtype}")
    _check_binary("targets", targets, mask)
    s = scores.to(torch.float64)
    if not bool(torch.isfinite(s[mask]).all()):
        raise ValueError("`scores` must be finite on real (masked) entries")

    s = s.masked_fill(~mask, float("inf"))
    ordered = s.sort(dim=1).values.contiguous()
    less = torch.searchsorted(ordered, s, side="left")
    less_equal = torch.searchsorted(ordered, s, side="right")
    ranks = (less + less_equal + 1).to(torch.float64) / 2.0

    pos = mask & (targets != 0)
    n_pos = pos.sum(dim=1).to(torch.float64)
    n_neg = (mask & (targets == 0)).sum(dim=1).to(torch.float64)
    rank_sum = torch.where(pos, ranks, torch.zeros_like(ranks)).sum(dim=1)
    auc = (rank_sum - n_pos * (n_pos + 1.0) / 2.0) / (n_pos * n_neg)
    return torch.where((n_pos > 0) & (n_neg > 0), auc, torch.full_like(auc, float("nan")))


def fragile_auroc(auroc: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Centers whose AUROC is defined but rests on a single case of some class ``[C]`` (bool).

    Binary: the split holds both classes and exactly one case of the minority class, so the AUROC is
    the rank of that one row among the others and moves in steps of ``1 / (n - 1)``. Multi-class
    (macro one-vs-rest): the same rule, any class present with exactly one case (its one-vs-rest
    AUROC rests on that row). A center with an undefined (NaN) AUROC is not fragile; it is counted
    as undefined instead.

    Args:
        auroc: ``[C]`` per-center AUROC as reported (NaN where undefined).
        targets: ``[C, n]`` class ids (0/1 for binary) of the padded split.
        mask: ``[C, n]`` bool, ``True`` for real rows.

    Returns:
        Bool ``[C]``.
    """
    if auroc.ndim != 1 or targets.shape != mask.shape or targets.shape[0] != auroc.shape[0]:
        raise ValueError(
            f"fragile_auroc: `auroc` [C], `targets` and `mask` [C, n] expected, got {tuple(auroc.shape)}, "
            f"{tuple(targets.shape)} and {tuple(mask.shape)}"
        )
    c = targets.shape[0]
    labels = targets.long()
    k = max(2, int(labels[mask].max()) + 1) if bool(mask.any()) else 2
    index = (torch.arange(c, device=labels.device).unsqueeze(1) * k + labels)[mask]
    counts = torch.zeros(c * k, dtype=torch.int64, device=labels.device)
    counts.index_add_(0, index, torch.ones_like(index))
    single = (counts.view(c, k) == 1).any(1)
    return single.to(auroc.device) & ~torch.isnan(auroc)


def pooled_auroc(scores: Tensor, targets: Tensor) -> float:
    """One exact AUROC over all rows (see :func:`batched_auroc` for the formula).

    Args:
        scores: ``[n]`` finite scores.
        targets: ``[n]`` binary labels.

    Returns:
        The AUROC as a Python float; NaN if the targets hold a single class or are empty.
    """
    if scores.ndim != 1 or targets.shape != scores.shape:
        raise ValueError(
            "`scores` and `targets` must both have shape [n], "
            f"got {tuple(scores.shape)} and {tuple(targets.shape)}"
        )
    return float(batched_auroc(scores[None], targets[None])[0])
