"""Upper confidence bound on a peer's utility (ABPS Sec. 4.3, Eq. 7; Algorithm 1 line 13)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["ucb"]


def ucb(mean: Tensor, count: Tensor, t: int, gamma: float = math.sqrt(2.0)) -> Tensor:
    """Eq. 7: ``UCB_{j->i}(t_k) = mu_{i->j}(t_k) + gamma * sqrt(2 log t_k / (n_{i->j}(t_k) + 1))``.

    At ``t = 1`` the bonus is 0 (``log 1 = 0``), so the first round ranks by the prior mean alone.

    Args:
        mean: Posterior means ``mu_{i->j}`` (``[C, C]`` from :meth:`BetaPosterior.mean`).
        count: Observation counts ``n_{i->j}``, same shape.
        t: 1-based round index ``t_k``.
        gamma: Exploration weight (paper default ``sqrt(2)``), ``>= 0``.

    Returns:
        float64 scores of ``mean``'s shape: ``ucb[i, j]`` is center ``i``'s score for peer ``j``.

    Raises:
        ValueError: If ``t < 1``, ``gamma < 0`` or the shapes differ.
    """
    if int(t) != t or t < 1:
        raise ValueError(f"t is the 1-based round index, got {t}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if mean.shape != count.shape:
        raise ValueError(f"mean {list(mean.shape)} and count {list(count.shape)} differ in shape")
    bonus = torch.sqrt(2.0 * math.log(t) / (count.to(torch.float64) + 1.0))
    return mean.to(torch.float64) + gamma * bonus
