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
import torchmetrics
from torch import Tensor
from torchmetrics.utilities import dim_zero_cat

__all__ = ["CenterAUROC", "batched_auroc", "pooled_auroc"]


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


class CenterAUROC(torchmetrics.Metric):
    """Per-center binary AUROC over accumulated ``(score, target, center_id)`` triples.

    States are lists of tensors reduced by concatenation (``dist_reduce_fx="cat"``), so they merge
    across processes and with :meth:`merge_state`. :meth:`compute` lays the rows out as a padded
    ``[num_centers, n_max]`` batch and calls :func:`batched_auroc` once.

    Args:
        num_centers: Number of centers ``C``; center ids must lie in ``[0, C)``.
        **kwargs: Passed to :class:`torchmetrics.Metric`.

    Example:
        >>> m = CenterAUROC(num_centers=2)
        >>> m.update(torch.tensor([0.1, 0.9, 0.3]), torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1]))
        >>> m.compute()
        tensor([1., nan], dtype=torch.float64)
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_centers: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(num_centers, int) or num_centers < 1:
            raise ValueError(f"`num_centers` must be a positive int, got {num_centers!r}")
        self.num_centers = num_centers
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("targets", default=[], dist_reduce_fx="cat")
        self.add_state("center_ids", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, targets: Tensor, center_ids: Tensor) -> None:
        """Add rows.

        Args:
            scores: ``[n]`` finite scores.
            targets: ``[n]`` binary labels.
            center_ids: ``[n]`` integer center ids in ``[0, num_centers)``.
        """
        if scores.ndim != 1 or targets.shape != scores.shape or center_ids.shape != scores.shape:
            raise ValueError(
                "`scores`, `targets` and `center_ids` must all have shape [n], got "
                f"{tuple(scores.shape)}, {tuple(targets.shape)} and {tuple(center_ids.shape)}"
            )
        if center_ids.is_floating_point() or center_ids.is_complex() or center_ids.dtype == torch.bool:
            raise ValueError(f"`center_ids` must be an integer tensor, got {center_ids.dtype}")
        if center_ids.numel() and (int(center_ids.min()) < 0 or int(center_ids.max()) >= self.num_centers):
            raise ValueError(f"`center_ids` must lie in [0, {self.num_centers})")
        _check_binary("targets", targets)
        s = scores.detach().to(torch.float64)
        if not bool(torch.isfinite(s).all()):
            raise ValueError("`scores` must be finite")
        self.scores.append(s)
        self.targets.append(targets.detach().to(torch.long))
        self.center_ids.append(center_ids.detach().to(torch.long))

    def compute(self) -> Tensor:
        """Per-center AUROC, float64 ``[num_centers]``, NaN for centers with one class or no rows."""
        if isinstance(self.scores, list) and not self.scores:
            return torch.full((self.num_centers,), float("nan"), dtype=torch.float64, device=self.device)
        scores = dim_zero_cat(self.scores)
        targets = dim_zero_cat(self.targets)
        centers = dim_zero_cat(self.center_ids)
        # Padded layout: rows grouped by center, column = position of the row within its center.
        order = torch.argsort(centers, stable=True)
        centers = centers[order]
        counts = torch.bincount(centers, minlength=self.num_centers)
        starts = torch.cumsum(counts, 0) - counts
        cols = torch.arange(centers.numel(), device=centers.device) - starts[centers]
        n_max = int(counts.max())
        shape = (self.num_centers, n_max)
        pad_scores = torch.zeros(shape, dtype=torch.float64, device=scores.device)
        pad_targets = torch.zeros(shape, dtype=torch.long, device=scores.device)
        mask = torch.zeros(shape, dtype=torch.bool, device=scores.device)
        pad_scores[centers, cols] = scores[order]
        pad_targets[centers, cols] = targets[order]
        mask[centers, cols] = True
        return batched_auroc(pad_scores, pad_targets, mask)
