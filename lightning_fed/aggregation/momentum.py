"""Per-center EMA of each center's aggregated update (``algorithm.momentum``; ABPS-X, ABPS Sec. 6.4).

For center ``i`` with own parameters ``theta_i`` and aggregated parameters ``m_i`` (what mixing
produced), the buffer and the new parameters are

    u_i <- beta u_i + (1 - beta) (m_i - theta_i),      theta_i <- theta_i + u_i,

applied only to centers that aggregated this round (a resting or unavailable center keeps its
parameters and its buffer). ``beta = 0`` is plain aggregation.

This is NOT server momentum (FedAvgM, Hsu et al. 2019): there is one buffer per center, of that
center's own step ``m_i - theta_i``, and it needs no server (ABPS uses it on its mesh). FedAvgM keeps
a single velocity on the server's global model; it is
:class:`~lightning_fed.aggregation.server_momentum.ServerMomentum` (``algorithm.server_momentum``
of :class:`~lightning_fed.algorithms.FedAvg`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.center_optimizer import keep_own_rows_
from lightning_fed.validation import check_number

__all__ = ["UpdateMomentum"]


class UpdateMomentum:
    """Per-center EMA of aggregated updates (one buffer per center; not FedAvgM server momentum).

    Args:
        beta: EMA weight in [0, 1) (0 disables; the paper's X extension uses 0.5).
    """

    def __init__(self, beta: float = 0.0) -> None:
        beta = check_number("algorithm.momentum", beta, 0.0, strict=False)
        if beta >= 1.0:
            raise ValueError(f"algorithm.momentum must be in [0, 1), got {beta}")
        self.beta = float(beta)
        self.buffers: dict[str, Tensor] = {}

    def apply(self, name: str, own: Tensor, mixed: Tensor, active: Tensor, in_place: bool = False) -> Tensor:
        """New parameters ``[C, ...]`` of tensor ``name``; ``active`` (bool ``[C]``) marks who aggregated.

        ``in_place``: ``mixed`` is the caller's to give away; with ``beta = 0`` the result,
        ``where(active, mixed, own)``, is then written into it (the same numbers without a new
        ``[C, ...]`` tensor: ABPS's mix, issue 33).
        """
        if not self.beta:
            if in_place:
                return keep_own_rows_(mixed, own, active)
            return torch.where(active.to(own.device).view(-1, *([1] * (own.dim() - 1))), mixed, own)
        keep = active.to(own.device).view(-1, *([1] * (own.dim() - 1)))
        buf = self.buffers.setdefault(name, torch.zeros_like(own))
        new_buf = self.beta * buf + (1.0 - self.beta) * (mixed - own)
        buf.copy_(torch.where(keep, new_buf, buf))
        return torch.where(keep, own + buf, own)

    def state_dict(self) -> dict[str, Any]:
        return {n: b.clone() for n, b in self.buffers.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffers = {n: b.clone() for n, b in state.items()}
