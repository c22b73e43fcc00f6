"""Aggregation as a mixing matrix (architecture decision 2).

Every aggregation rule here is a row-stochastic ``C x C`` matrix ``M`` applied to the stacked
shared parameters: ``theta_i <- sum_j M_ij theta_j``. FedAvg's star is the rank-one
``M = 1 w^T`` with ``w_j = n_j / sum_k n_k`` (McMahan et al. 2017), so it is computed as the one
weighted average ``w^T Theta`` broadcast back, without forming ``M``; FedAvg over a center and its
partners (ABPS Alg. 1 line 25) and Metropolis weights on a graph use :func:`mix` with a full ``M``.
Personalized (head) parameters are simply left out of the dict that is mixed.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["mix", "sample_weights", "weighted_average"]


def sample_weights(n_train: Tensor) -> Tensor:
    """FedAvg weights ``w_j = n_j / sum_k n_k`` (float64)."""
    n = n_train.to(torch.float64)
    if (n < 0).any() or n.sum() <= 0:
        raise ValueError("sample counts must be non-negative with a positive sum")
    return n / n.sum()


def weighted_average(params: dict[str, Tensor], weights: Tensor) -> dict[str, Tensor]:
    """``sum_j w_j theta_j`` per tensor, kept with a leading dimension of 1."""
    out = {}
    for name, p in params.items():
        w = weights.to(p.device, torch.float64).view(-1, *([1] * (p.dim() - 1)))
        out[name] = (w * p.to(torch.float64)).sum(0, keepdim=True).to(p.dtype)
    return out


def mix(params: dict[str, Tensor], matrix: Tensor) -> dict[str, Tensor]:
    """Apply the mixing matrix: ``theta_i <- sum_j M_ij theta_j`` for every stacked tensor.

    Args:
        params: Stacked tensors ``{name: [C, ...]}``.
        matrix: Row-stochastic ``[C, C]``.

    Raises:
        ValueError: If ``matrix`` is not square of size ``C`` or its rows do not sum to 1.
    """
    first = next(iter(params.values()))
    c = first.shape[0]
    if matrix.shape != (c, c):
        raise ValueError(f"mixing matrix must be [{c}, {c}], got {list(matrix.shape)}")
    if not torch.allclose(matrix.sum(1).to(torch.float64), torch.ones(c, dtype=torch.float64), atol=1e-6):
        raise ValueError("mixing matrix rows must sum to 1 (row-stochastic)")
    out = {}
    for name, p in params.items():
        flat = p.reshape(c, -1)
        out[name] = (matrix.to(flat.device, flat.dtype) @ flat).reshape(p.shape)
    return out
