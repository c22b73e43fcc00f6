r"""Proper-scoring utilities in ``[0, 1]`` of every row of a padded batch (ABPS Shapley utility, issue 30).

The paper's Shapley utility is the receiver's validation AUROC (Sec. 3), which is undefined on a
split with one class and nearly ternary on a split with one positive. These are the alternatives of
:class:`~lightning_fed.selection.abps.credit.ShapleyCredit` ``utility``, defined on any non-empty
split, both mapped to ``[0, 1]`` so that the Shapley values stay on the AUROC's scale and Eq. 5's
``(phi_min, phi_max) = (-0.1, 0.1)`` clip keeps its meaning:

* :func:`batched_likelihood` (``log_likelihood``): the **geometric-mean likelihood**

  .. math:: U = \exp\Big(\frac{1}{n}\sum_{k=1}^{n} \log p_\theta(y_k \mid x_k)\Big)
            = \exp(-\mathrm{BCE}), \qquad
            \log p_\theta(y \mid x) = y \log\sigma(z) + (1 - y)\log\sigma(-z).

  Derivation of the map: the mean log-likelihood :math:`\bar\ell \in (-\infty, 0]` is unbounded
  below, so its Shapley values (differences of coalition utilities) have no fixed scale for the
  Beta update (Eq. 6 needs :math:`\bar\phi \in [0, 1]`). :math:`U = e^{\bar\ell}` is strictly
  increasing in :math:`\bar\ell` (the order of coalitions is the likelihood's), lies in ``(0, 1]``
  like an AUROC, is the probability the model gives the true label on a geometric average (0.5 for
  a coin flip, :math:`e^{-H(\pi)}` for the constant base-rate :math:`\pi` predictor: 0.72 at
  :math:`\pi = 0.1`), and to first order :math:`\Delta U = U\,\Delta\bar\ell`: a Shapley value is the
  per-row gain in nats scaled by the receiver's likelihood, so a gain of 0.01 nat per row at
  :math:`U = 0.7` is :math:`\phi = 0.007`, the size of a 0.7-point AUROC gain. Every row counts (not
  only positive-negative pairs), which is what makes it less noisy than the AUROC on small splits.
* :func:`batched_brier` (``brier``): :math:`U = 1 - \frac{1}{n}\sum_k (\sigma(z_k) - y_k)^2`, in
  ``[0, 1]`` by construction.

Both are computed in float64 from the logits (``log sigma(z) = -softplus(-z)``, stable at any ``z``);
a row without real entries is NaN (no observation, as an undefined AUROC).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["batched_brier", "batched_likelihood"]


def _checked(logits: Tensor, targets: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    if logits.ndim != 2 or targets.shape != logits.shape:
        raise ValueError(
            "logits and targets must be [C, n] of one shape, "
            f"got {tuple(logits.shape)}, {tuple(targets.shape)}"
        )
    if mask is None:
        mask = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    elif mask.dtype != torch.bool or mask.shape != logits.shape:
        raise ValueError(f"mask must be a bool tensor of shape {tuple(logits.shape)}")
    z, y = logits.to(torch.float64), targets.to(torch.float64)
    if not bool(((y[mask] == 0) | (y[mask] == 1)).all()):
        raise ValueError("targets must be binary (0/1) on real entries")
    return torch.where(mask, z, 0.0), torch.where(mask, y, 0.0), mask


def _row_mean(values: Tensor, mask: Tensor) -> Tensor:
    count = mask.sum(1).to(torch.float64)
    total = torch.where(mask, values, 0.0).sum(1)
    return torch.where(count > 0, total / count.clamp(min=1), float("nan"))


def batched_likelihood(logits: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:
    """Geometric-mean likelihood ``exp(mean_k log p(y_k | x_k))`` of every row (module docstring).

    Args:
        logits: ``[C, n]`` binary logits.
        targets: ``[C, n]`` labels 0/1.
        mask: Optional ``[C, n]`` bool, True for real entries.

    Returns:
        float64 ``[C]`` in ``(0, 1]``, NaN where a row has no real entry.
    """
    z, y, mask = _checked(logits, targets, mask)
    log_p = -(y * F.softplus(-z) + (1.0 - y) * F.softplus(z))
    return torch.exp(_row_mean(log_p, mask))


def batched_brier(logits: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:
    """``1 - mean_k (sigmoid(z_k) - y_k)^2`` of every row (arguments as :func:`batched_likelihood`)."""
    z, y, mask = _checked(logits, targets, mask)
    return 1.0 - _row_mean((torch.sigmoid(z) - y) ** 2, mask)
