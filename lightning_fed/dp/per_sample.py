r"""DP-SGD's gradient (Abadi et al. 2016, Algorithm 1): per-sample gradients, each clipped to L2 norm
``C``, summed, plus Gaussian noise ``N(0, sigma^2 C^2 I)``, divided by the batch size:

.. math::

    \tilde g = \frac{1}{B}\Big(\sum_b g_b \min\big(1, C / \|g_b\|_2\big)
        + \mathcal N(0, \sigma^2 C^2 I)\Big)

Per-sample gradients come from ``torch.func.vmap(torch.func.grad(...))`` over the rows of a batch
(the norm of ``g_b`` is over all of the model's parameters at once), so ``k`` stacked centers are
one more ``vmap``; ``tests/test_dp_sgd.py`` checks them against a loop of one backward per row.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["clip_rows", "noisy_clipped_sum", "per_sample_grads"]


def per_sample_grads(
    loss: Callable[[dict[str, Tensor], Tensor, Tensor], Tensor],
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
) -> dict[str, Tensor]:
    """``{name: [B, *shape]}``: the gradient of ``loss(params, x_b[None], y_b[None])`` for every row ``b``.

    Args:
        loss: A scalar loss of one model on a batch (``torch.func``-transformable).
        params: One model's parameters.
        x: Rows ``[B, ...]``.
        y: Labels ``[B]``.
    """

    def one(p: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
        return loss(p, xb.unsqueeze(0), yb.unsqueeze(0))

    return torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(params, x, y)


def clip_rows(grads: dict[str, Tensor], clip: float) -> dict[str, Tensor]:
    """Each row's gradient times ``min(1, clip / ||g_b||)`` (the norm over every tensor of the row)."""
    sq = None
    for g in grads.values():
        part = g.reshape(g.shape[0], -1).pow(2).sum(1)
        sq = part if sq is None else sq + part
    factor = (clip / sq.sqrt().clamp_min(1e-12)).clamp(max=1.0)
    return {n: g * factor.view(-1, *([1] * (g.dim() - 1))).to(g.dtype) for n, g in grads.items()}


def noisy_clipped_sum(
    grads: dict[str, Tensor], clip: float, noise_multiplier: float, generator: torch.Generator | None
) -> dict[str, Tensor]:
    """DP-SGD's ``tilde g`` (module docstring) from per-sample gradients ``{name: [B, ...]}``."""
    clipped = clip_rows(grads, clip)
    out = {}
    for n, g in clipped.items():
        total = g.sum(0)
        if noise_multiplier:
            noise = torch.randn(total.shape, generator=generator, dtype=total.dtype, device="cpu")
            total = total + noise_multiplier * clip * noise.to(total.device)
        out[n] = total / g.shape[0]
    return out
