"""Beta posterior over each peer's Shapley utility (ABPS Sec. 4.2, Eqs. 5-6).

Center ``i`` keeps a belief ``Beta(alpha_{i->j}, beta_{i->j})`` about the utility of every peer
``j``. After a round with ``j`` in its active set, the Shapley contribution ``phi_{j->i}`` is mapped
to ``[0, 1]`` by the affine clip of Eq. 5 and treated as a soft Bernoulli observation (Eq. 6):
``alpha += phi_bar``, ``beta += 1 - phi_bar``, ``n += 1``. The posterior mean
``mu_{i->j} = alpha / (alpha + beta)`` feeds the UCB of Eq. 7.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["BetaPosterior", "clip_utility"]


def clip_utility(phi: Tensor | float, phi_min: float = -0.1, phi_max: float = 0.1) -> Tensor:
    """Eq. 5: ``phi_bar = clip_[0,1]((phi - phi_min) / (phi_max - phi_min))``.

    With the paper's ``(phi_min, phi_max) = (-0.1, 0.1)``: ``phi = 0`` maps to 0.5 (exactly
    ``tau_acc``), ``phi <= -0.1`` to 0 and ``phi >= 0.1`` to 1.

    Args:
        phi: Shapley contributions (any shape).
        phi_min: Contribution mapped to 0.
        phi_max: Contribution mapped to 1.

    Returns:
        ``phi_bar`` in ``[0, 1]`` (float64 unless ``phi`` is already a floating tensor).

    Raises:
        ValueError: If ``phi_min >= phi_max``.
    """
    if not phi_min < phi_max:
        raise ValueError(f"phi_min must be < phi_max, got {phi_min} >= {phi_max}")
    phi = torch.as_tensor(phi)
    if not phi.is_floating_point():
        phi = phi.to(torch.float64)
    return ((phi - phi_min) / (phi_max - phi_min)).clamp(0.0, 1.0)


class BetaPosterior:
    """Beta beliefs of every center about every peer, as ``[C, C]`` float64 matrices.

    Row ``i`` holds center ``i``'s beliefs about peers ``j``: ``alpha[i, j]``, ``beta[i, j]`` and the
    number of observations ``count[i, j]`` (``n_{i->j}`` of Eq. 7). The diagonal is never updated.

    Args:
        num_centers: ``C``.
        alpha0: Prior pseudo-successes (Algorithm 1 line 7), ``> 0``.
        beta0: Prior pseudo-failures, ``> 0``.

    Raises:
        ValueError: If ``num_centers < 1`` or a prior parameter is not positive.
    """

    def __init__(self, num_centers: int, alpha0: float = 1.0, beta0: float = 1.0) -> None:
        if num_centers < 1:
            raise ValueError(f"num_centers must be >= 1, got {num_centers}")
        if not (alpha0 > 0 and beta0 > 0):
            raise ValueError(f"Beta prior needs alpha0 > 0 and beta0 > 0, got ({alpha0}, {beta0})")
        self.num_centers = num_centers
        self.alpha0, self.beta0 = float(alpha0), float(beta0)
        shape = (num_centers, num_centers)
        self.alpha = torch.full(shape, self.alpha0, dtype=torch.float64)
        self.beta = torch.full(shape, self.beta0, dtype=torch.float64)
        self.count = torch.zeros(shape, dtype=torch.float64)

    def update(self, i: Tensor, j: Tensor, phi_bar: Tensor) -> None:
        """Eq. 6 for a batch of observations: center ``i[e]`` observed ``phi_bar[e]`` from ``j[e]``.

        Repeated ``(i, j)`` pairs within one call accumulate (each is one observation).

        Args:
            i: Observing centers ``[E]``.
            j: Observed peers ``[E]``.
            phi_bar: Clipped contributions ``[E]`` in ``[0, 1]`` (see :func:`clip_utility`).

        Raises:
            ValueError: On mismatched lengths, ids out of range, ``i == j``, or ``phi_bar``
                outside ``[0, 1]``.
        """
        i = torch.as_tensor(i).reshape(-1).to("cpu", torch.int64)
        j = torch.as_tensor(j).reshape(-1).to("cpu", torch.int64)
        phi_bar = torch.as_tensor(phi_bar).reshape(-1).to("cpu", torch.float64)
        if not (i.shape == j.shape == phi_bar.shape):
            raise ValueError(f"update needs equal lengths, got {i.numel()}, {j.numel()}, {phi_bar.numel()}")
        if i.numel() == 0:
            return
        c = self.num_centers
        if int(torch.minimum(i, j).min()) < 0 or int(torch.maximum(i, j).max()) >= c:
            raise ValueError(f"center ids must be in [0, {c})")
        if bool((i == j).any()):
            raise ValueError("a center does not observe itself (i == j)")
        if not bool(((phi_bar >= 0) & (phi_bar <= 1)).all()):
            raise ValueError("phi_bar must lie in [0, 1] (apply clip_utility first)")
        self.alpha.index_put_((i, j), phi_bar, accumulate=True)
        self.beta.index_put_((i, j), 1.0 - phi_bar, accumulate=True)
        self.count.index_put_((i, j), torch.ones_like(phi_bar), accumulate=True)

    def mean(self) -> Tensor:
        """Posterior means ``mu_{i->j} = alpha / (alpha + beta)`` ``[C, C]``."""
        return self.alpha / (self.alpha + self.beta)

    def state_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha.clone(),
            "beta": self.beta.clone(),
            "count": self.count.clone(),
            "alpha0": self.alpha0,
            "beta0": self.beta0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        shape = (self.num_centers, self.num_centers)
        for key in ("alpha", "beta", "count"):
            if tuple(state[key].shape) != shape:
                raise ValueError(f"posterior {key} must be {list(shape)}, got {list(state[key].shape)}")
        self.alpha = state["alpha"].to("cpu", torch.float64).clone()
        self.beta = state["beta"].to("cpu", torch.float64).clone()
        self.count = state["count"].to("cpu", torch.float64).clone()
        self.alpha0 = float(state.get("alpha0", self.alpha0))
        self.beta0 = float(state.get("beta0", self.beta0))
