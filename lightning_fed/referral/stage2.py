"""EdgeDRM stage II: frozen encoders, private heads and routing potentials (Sec. 3.1, App. B.4, D.2).

With each client's representations ``z_ur = g_{theta_u}(x_ur)`` of its own training rows computed
once (encoders frozen), stage II minimizes the balanced graph objective

    m L_G = sum_u [ lambda T_u(alpha_u, beta_u) + kappa sum_{v in N(u)} L_{uv}^{(u)}(a_u, a_v) ],
    kappa = m (1 - lambda) / (2|E|)

(see :mod:`lightning_fed.referral.potentials` for the derivation), over the linear heads
``(beta_u, alpha_u)`` (``head.weight``, ``head.bias``) and the potentials ``a_u = (theta_u, b_u)``.
The task term only moves the heads and the edge terms only move the potentials (routing gradients
do not reach the encoder or the head, App. D.2.1). Each edge term reads only its two endpoints; all
clients and edges are evaluated at once on zero-padded ``[C, N, d]`` tensors.

Optimizer: full-batch Adam on the stacked tensors (Adam is elementwise, so this is exactly one Adam
per client), ``epochs`` steps, potentials initialized at 0 (every ``phi_i = 1``). The potentials are
identified only up to a common shift, which cancels in every edge difference. Full-batch steps are
deterministic, so no random draw is needed (the paper's 200 mini-batch rounds with a cosine rate
are a schedule choice, App. D.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fed.referral.potentials import Potentials, endpoint_losses, kappa, neighbour_table

__all__ = ["Stage2Result", "fit_stage2", "pad_rows"]


@dataclass(frozen=True, eq=False)
class Stage2Result:
    """What stage II produced.

    Attributes:
        weight: New head weights ``[C, K, d]``.
        bias: New head biases ``[C, K]``.
        potentials: The fitted routing potentials with the training counts.
        history: Per-epoch scalars (``loss``, ``task``, ``route``).
    """

    weight: Tensor
    bias: Tensor
    potentials: Potentials
    history: list[dict[str, float]]


def pad_rows(rows: list[Tensor], fill: float = 0.0) -> tuple[Tensor, Tensor]:
    """Stack per-client ``[n_u, ...]`` into ``[C, max n, ...]`` and a bool row mask ``[C, max n]``."""
    n_max = max(int(r.shape[0]) for r in rows)
    out = rows[0].new_full((len(rows), n_max, *rows[0].shape[1:]), fill)
    mask = torch.zeros(len(rows), n_max, dtype=torch.bool, device=rows[0].device)
    for u, r in enumerate(rows):
        out[u, : r.shape[0]] = r
        mask[u, : r.shape[0]] = True
    return out, mask


def fit_stage2(
    z: list[Tensor],
    y: list[Tensor],
    weight: Tensor,
    bias: Tensor,
    adjacency: Tensor,
    lam: float,
    epochs: int,
    lr: float,
    loss_rows: Callable[[Tensor, Tensor], Tensor],
    log: Callable[[dict[str, float]], None] | None = None,
) -> Stage2Result:
    """Fit heads and potentials with the balanced endpoint objective (module docstring).

    Args:
        z: Per-client frozen representations of its own training rows ``[n_u, d]``.
        y: Per-client labels ``[n_u]`` as ``loss_rows`` expects them (class ids).
        weight: Initial head weights ``[C, K, d]`` (stage I's heads).
        bias: Initial head biases ``[C, K]``.
        adjacency: Bool ``[C, C]`` graph adjacency (symmetric, no self loops).
        lam: Task weight ``lambda`` in ``[0, 1]``.
        epochs: Full-batch optimizer steps.
        lr: Adam learning rate.
        loss_rows: Per-row task loss ``(logits [n, K], y [n]) -> [n]``.
        log: Called once per epoch with ``{"stage2_loss", "stage2_task", "stage2_route"}``.

    Raises:
        ValueError: On mismatched shapes, ``epochs < 1``, ``lr <= 0`` or ``lam`` outside ``[0, 1]``.
    """
    c = len(z)
    if len(y) != c or weight.shape[0] != c or bias.shape[0] != c or adjacency.shape != (c, c):
        raise ValueError(f"stage II: {c} clients' representations but mismatched labels/heads/graph")
    if epochs < 1:
        raise ValueError(f"algorithm.stage2_epochs must be >= 1, got {epochs}")
    if not lr > 0:
        raise ValueError(f"algorithm.lr must be > 0, got {lr}")
    adjacency = adjacency.to(torch.bool).cpu()
    k_edge = kappa(c, int(adjacency.sum()) // 2, lam)
    device, dtype = z[0].device, z[0].dtype
    zp, mask = pad_rows([t.detach().to(device, dtype) for t in z])
    yp, _ = pad_rows([t.to(device) for t in y])
    nbr, valid = (t.to(device) for t in neighbour_table(adjacency))
    m = mask.to(dtype)
    n_rows = m.sum(1).clamp_min(1.0)

    w = weight.detach().to(device, dtype).clone().requires_grad_(True)
    b_head = bias.detach().to(device, dtype).clone().requires_grad_(True)
    b = torch.zeros(c, device=device, dtype=dtype, requires_grad=True)
    theta = torch.zeros(c, zp.shape[2], device=device, dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([w, b_head, b, theta], lr=lr)
    history = []
    for _ in range(epochs):
        opt.zero_grad(set_to_none=True)
        logits = torch.einsum("cnd,ckd->cnk", zp, w) + b_head.unsqueeze(1)
        rows = loss_rows(logits.reshape(-1, logits.shape[-1]), yp.reshape(-1)).reshape(c, -1)
        task = (rows * m).sum(1) / n_rows  # T_u
        route = endpoint_losses(zp, mask, b, theta, nbr, valid).sum(1)  # sum_{v in N(u)} L_uv^(u)
        loss = (lam * task + k_edge * route).sum()  # m L_G = sum_u L_u
        loss.backward()
        opt.step()
        stats = {
            "stage2_loss": float(loss.detach()) / c,
            "stage2_task": float(task.detach().mean()),
            "stage2_route": float(route.detach().mean()),
        }
        history.append(stats)
        if log is not None:
            log(stats)
    counts = mask.sum(1).to(torch.int64).cpu()
    pot = Potentials(b.detach(), theta.detach(), counts)
    return Stage2Result(w.detach(), b_head.detach(), pot, history)
