"""DeLong's variance of the AUROC and its 95 % interval, batched over centers.

DeLong, DeLong & Clarke-Pearson (1988), "Comparing the areas under two or more correlated receiver
operating characteristic curves: a nonparametric approach", Biometrics 44(3):837-845. For ``P``
positives with scores ``X_i`` and ``N`` negatives with scores ``Y_j``, with
``psi(x, y) = 1[x > y] + 1/2 1[x = y]``, the structural components are

    V10_i = (1/N) sum_j psi(X_i, Y_j),      V01_j = (1/P) sum_i psi(X_i, Y_j),

their mean is the AUROC ``A``, and

    Var(A) = S10 / P + S01 / N,   S10 = var(V10), S01 = var(V01)   (sample variances, ddof = 1).

The components come from midranks (Sun & Xu 2014, IEEE Signal Processing Letters 21(11)): with
``R_i`` the midrank of positive ``i`` among all rows and ``R_i^+`` among the positives,
``V10_i = (R_i - R_i^+) / N``; for negative ``j``, ``V01_j = 1 - (R_j - R_j^-) / P``. So one sort per
center gives every interval, without the ``P x N`` comparison matrix.

Why DeLong rather than a bootstrap: it is deterministic (no draws to seed, the same interval on
every rerun and rank), closed-form and batched (one call for all centers, or for 1,000 simulated
replications), and it is the interval clinical papers quote. The 95 % interval is the Wald interval
``A +- 1.96 sqrt(Var(A))`` clipped to [0, 1]. It needs at least two rows of each class (a sample
variance of one value is undefined): with one case of a class (a *fragile* AUROC) or none the
interval is NaN, so a center's interval is never narrower than its data can support.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["Z95", "delong_interval", "delong_variance"]

#: The 97.5 % standard normal quantile (two-sided 95 % interval).
Z95 = 1.959963984540054


def _midranks(s: Tensor, mask: Tensor) -> Tensor:
    """Midrank of every real entry of each row among that row's real entries (``[C, n]`` float64)."""
    s = s.masked_fill(~mask, float("inf"))
    ordered = s.sort(dim=1).values.contiguous()
    less = torch.searchsorted(ordered, s, side="left")
    less_equal = torch.searchsorted(ordered, s, side="right")
    return (less + less_equal + 1).to(torch.float64) / 2.0


def delong_variance(scores: Tensor, targets: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """AUROC and DeLong variance of every row of a padded ``[C, n]`` batch.

    Args:
        scores: ``[C, n]`` finite scores on real entries.
        targets: ``[C, n]`` binary labels.
        mask: ``[C, n]`` bool, True for real entries (None: all real).

    Returns:
        ``(auroc, variance)``, float64 ``[C]`` each; the AUROC is NaN where a class is absent, the
        variance NaN where a class has fewer than two rows.
    """
    if scores.ndim != 2 or targets.shape != scores.shape:
        raise ValueError(
            f"delong_variance: `scores` and `targets` of shape [C, n] expected, got {tuple(scores.shape)} "
            f"and {tuple(targets.shape)}"
        )
    if mask is None:
        mask = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    s = scores.to(torch.float64)
    pos = mask & (targets != 0)
    neg = mask & (targets == 0)
    n_pos = pos.sum(1).to(torch.float64)
    n_neg = neg.sum(1).to(torch.float64)
    rank_all = _midranks(s, mask)
    rank_pos = _midranks(s, pos)
    rank_neg = _midranks(s, neg)
    v10 = torch.where(pos, (rank_all - rank_pos) / n_neg.clamp(min=1).unsqueeze(1), 0.0)
    v01 = torch.where(neg, 1.0 - (rank_all - rank_neg) / n_pos.clamp(min=1).unsqueeze(1), 0.0)
    auroc = v10.sum(1) / n_pos
    auroc = torch.where((n_pos > 0) & (n_neg > 0), auroc, torch.full_like(auroc, float("nan")))
    s10 = torch.where(pos, (v10 - auroc.unsqueeze(1)) ** 2, 0.0).sum(1) / (n_pos - 1)
    s01 = torch.where(neg, (v01 - auroc.unsqueeze(1)) ** 2, 0.0).sum(1) / (n_neg - 1)
    variance = s10 / n_pos + s01 / n_neg
    enough = (n_pos >= 2) & (n_neg >= 2)
    return auroc, torch.where(enough, variance, torch.full_like(variance, float("nan")))


def delong_interval(
    scores: Tensor, targets: Tensor, mask: Tensor | None = None, z: float = Z95
) -> tuple[Tensor, Tensor, Tensor]:
    """AUROC with its DeLong (1988) Wald interval ``A +- z sqrt(Var(A))``, clipped to [0, 1].

    Args:
        scores, targets, mask: As :func:`delong_variance`.
        z: Normal quantile (default 1.96: a 95 % interval).

    Returns:
        ``(auroc, low, high)``, float64 ``[C]``; the bounds are NaN where either class has fewer than
        two rows.
    """
    auroc, variance = delong_variance(scores, targets, mask)
    half = z * variance.clamp(min=0).sqrt()
    return auroc, (auroc - half).clamp(0.0, 1.0), (auroc + half).clamp(0.0, 1.0)
