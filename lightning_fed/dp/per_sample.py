r"""DP-SGD's gradient (Abadi et al. 2016, Algorithm 1): per-sample gradients, each clipped to L2 norm
``C``, summed, plus Gaussian noise ``N(0, sigma^2 C^2 I)``, divided by the batch size:

.. math::

    \tilde g = \frac{1}{B}\Big(\sum_b g_b \min\big(1, C / \|g_b\|_2\big)
        + \mathcal N(0, \sigma^2 C^2 I)\Big)

Per-sample gradients come from ``torch.func.vmap(torch.func.grad(...))`` over the rows of a batch
(the norm of ``g_b`` is over all of the model's parameters at once), so ``k`` stacked centers are
one more ``vmap``; ``tests/test_dp_sgd.py`` checks them against a loop of one backward per row.

In the engines (``trainer.dp.level: sample``) a step's rows are flat ``[k, B, D]`` (``k`` centers,
``B`` batch slots, ``D`` parameters in the engine's flat order) with a row mask ``[k, B]`` (a
center's short last batch is padded); :func:`dp_flat_mean` clips, masks, sums and adds the noise
:func:`step_noise` draws, and divides by each center's real rows ``B_c`` (the batches are fixed-size
shuffled batches, so ``B_c`` is the batch size but for the last batch of an epoch). The noise of
center ``c`` at step ``t`` of round ``r`` is ``D`` standard normals from its own generator seeded by
``(seed, "dp-noise", r, c, t)``: the same in the packed and the sequential engine and whichever
centers a center is packed with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["clip_rows", "dp_flat_mean", "noisy_clipped_sum", "per_sample_grads", "step_noise"]


def per_sample_grads(
    loss: Callable[[dict[str, Tensor], Tensor, Tensor], Tensor],
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    randomness: str = "error",
    with_loss: bool = False,
) -> dict[str, Tensor] | tuple[dict[str, Tensor], Tensor]:
    """``{name: [B, *shape]}``: the gradient of ``loss(params, x_b[None], y_b[None])`` for every row ``b``.

    Args:
        loss: A scalar loss of one model on a batch (``torch.func``-transformable).
        params: One model's parameters.
        x: Rows ``[B, ...]``.
        y: Labels ``[B]``.
        randomness: ``torch.vmap``'s for random ops in the loss (``"different"``: dropout draws a
            mask per row; the default refuses random ops).
        with_loss: Also return each row's loss ``[B]`` (from the same forward pass).
    """

    def one(p: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
        return loss(p, xb.unsqueeze(0), yb.unsqueeze(0))

    transform = torch.func.grad_and_value(one) if with_loss else torch.func.grad(one)
    return torch.func.vmap(transform, in_dims=(None, 0, 0), randomness=randomness)(params, x, y)


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


def step_noise(
    seed: int, round_idx: int, centers: list[int], step: int, size: int, dtype: torch.dtype
) -> Tensor:
    """Standard normals ``[k, size]``: row ``i`` from ``(seed, "dp-noise", round_idx, centers[i], step)``
    (module docstring), drawn in float64 on the CPU and cast to ``dtype``."""
    gens = [torch_generator(seed, "dp-noise", round_idx, c, step) for c in centers]
    rows = [torch.randn(size, generator=g, dtype=torch.float64) for g in gens]
    return torch.stack(rows).to(dtype) if rows else torch.zeros(0, size, dtype=dtype)


def dp_flat_mean(rows: Tensor, mask: Tensor, clip: float, noise_multiplier: float, noise: Tensor) -> Tensor:
    r"""DP-SGD's ``tilde g`` ``[k, D]`` of ``k`` centers from their flat per-row gradients ``[k, B, D]``.

    ``tilde g_c = (sum_b m_cb g_cb min(1, C / ||g_cb||) + sigma C z_c) / sum_b m_cb`` with ``m`` the
    row mask ``[k, B]`` (0 on padded slots) and ``z_c`` the standard normals ``noise [k, D]``
    (:func:`step_noise`); the module docstring's formula with ``B`` the center's real rows.

    The sum over ``b`` is an elementwise product reduced over the row dimension (each entry summed in
    row order), not ``einsum``: its batched matmul gave a center last-bit different sums depending on
    how many centers shared the call, and a shard or a pass of the centers
    (:mod:`lightning_fed.engine.passes`) must train to the bits of the whole federation.
    """
    norms = rows.pow(2).sum(2).sqrt().clamp_min(1e-12)
    factor = (clip / norms).clamp(max=1.0) * mask
    total = (factor.to(rows.dtype).unsqueeze(2) * rows).sum(1)
    total = total + (noise_multiplier * clip) * noise.to(total.device, total.dtype)
    return total / mask.sum(1, keepdim=True).to(total.dtype)
