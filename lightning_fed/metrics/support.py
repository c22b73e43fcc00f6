"""How much data stands behind each center's number: rows and class counts of a padded split, and
the federation-level AUROC averages that say what they average.

A per-center AUROC on a split with one death is the rank of that one row; a mean over such centers
is mostly noise. :func:`split_support` counts, per center, the rows of each class; :func:`auroc_averages`
gives the four federation figures the summary reports side by side:

- ``mean``: over the centers whose AUROC is defined (both classes present; the ABPS paper's metric);
- ``robust``: over the centers with at least ``m`` rows of every class present (and two classes),
  the headline on small centers: it leaves out the AUROCs that rest on one or two cases;
- ``weighted``: over defined centers, each weighted by its split's rows, ``sum n_c A_c / sum n_c``;
- ``pooled``: one AUROC over every center's rows together (computed by the evaluation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["SplitSupport", "auroc_averages", "split_support"]


@dataclass(frozen=True, eq=False)
class SplitSupport:
    """Per-center counts of one split (int64 ``[C]`` each).

    Attributes:
        n: Rows.
        positives: Rows of class 1 (binary; for ``K`` classes, rows of class 1 too).
        negatives: Rows of class 0.
        min_class: Rows of the rarest class present (0 for an empty split).
        classes: Number of classes present.
    """

    n: Tensor
    positives: Tensor
    negatives: Tensor
    min_class: Tensor
    classes: Tensor

    def robust(self, m: int) -> Tensor:
        """Centers with at least two classes and at least ``m`` rows of each class present (bool ``[C]``)."""
        return (self.classes >= 2) & (self.min_class >= m)


def split_support(targets: Tensor, mask: Tensor, num_classes: int = 2) -> SplitSupport:
    """Count the rows of each class per center of a padded split.

    Args:
        targets: ``[C, n]`` class ids (0/1 for binary).
        mask: ``[C, n]`` bool, True for real rows.
        num_classes: ``K`` (2 for binary).

    Returns:
        The :class:`SplitSupport`.
    """
    labels = targets.long().clamp(0, num_classes - 1)
    counts = torch.stack([((labels == k) & mask).sum(1) for k in range(num_classes)], dim=1)
    present = counts > 0
    big = torch.iinfo(torch.int64).max
    min_class = torch.where(present, counts, torch.full_like(counts, big)).min(1).values
    min_class = torch.where(present.any(1), min_class, torch.zeros_like(min_class))
    return SplitSupport(
        n=mask.sum(1),
        positives=counts[:, 1],
        negatives=counts[:, 0],
        min_class=min_class,
        classes=present.sum(1),
    )


def auroc_averages(auroc: Tensor, support: SplitSupport, m: int) -> dict[str, float | int]:
    """The mean, robust mean (``>= m`` of every class) and size-weighted mean of per-center AUROCs.

    Args:
        auroc: ``[C]`` per-center AUROC (NaN where undefined).
        support: The split's :class:`SplitSupport`.
        m: Fewest rows of each class a center needs to enter the robust mean.

    Returns:
        ``{"mean", "robust", "robust_centers", "weighted"}``; a mean over no center is NaN.
    """
    values = auroc.detach().double().cpu()
    defined = ~torch.isnan(values)
    robust = support.robust(m).cpu() & defined
    n = support.n.double().cpu()

    def mean(sel: Tensor) -> float:
        return float(values[sel].mean()) if bool(sel.any()) else math.nan

    weight = n[defined].sum()
    weighted = float((values[defined] * n[defined]).sum() / weight) if float(weight) > 0 else math.nan
    return {
        "mean": mean(defined),
        "robust": mean(robust),
        "robust_centers": int(robust.sum()),
        "weighted": weighted,
    }
