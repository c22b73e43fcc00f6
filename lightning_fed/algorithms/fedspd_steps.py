"""FedSPD's local computations on stacked models: E-step, weighted gradients, per-cluster mixing, mixtures.

All functions work on stacked parameters ``{name: [k, ...]}`` through
:func:`~lightning_fed.engine.base.packed_logits` (the model's ``packed_forward`` or ``vmap`` over
``torch.func.functional_call``), with dropout off: the algorithm's own steps are deterministic given
the rows they see. Rows and models never cross clients here; :mod:`lightning_fed.algorithms.fedspd`
decides what is exchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

from lightning_fed.engine.base import packed_logits
from lightning_fed.models.base import CenterModule

__all__ = [
    "cluster_average",
    "draw_cluster_rows",
    "draw_rows",
    "gather_rows",
    "mixture",
    "soft_assignments",
    "weighted_grads",
    "weighted_sgd_step",
]

#: Weight sums below this count as zero (a batch with no membership in a cluster does not step it).
_EPS = 1e-12


@contextmanager
def eval_mode(module: CenterModule) -> Iterator[None]:
    """Run with ``module.eval()`` (no dropout), restoring its previous mode afterwards."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


@torch.no_grad()
def soft_assignments(
    module: CenterModule,
    clusters: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> tuple[Tensor, Tensor]:
    """E-step of one client: ``gamma_rs = softmax_s(-l(theta_s; x_r, y_r) / T)`` for every row ``r``.

    FedSPD (Lin et al. 2025, Sec. 3) assigns each data point to the cluster whose model fits it best;
    this is the soft version: a row's membership in cluster ``s`` falls off exponentially with the
    cluster model's loss on it; ``T = 0`` is the paper's hard rule, a one-hot of the argmin-loss cluster
    (ties go to the lowest index).

    Args:
        module: Model template.
        clusters: The client's ``S`` cluster models ``{name: [S, ...]}``.
        x: Training rows ``[n, ...]``.
        y: Labels ``[n]``.
        temperature: ``T >= 0`` (0: hard assignments).
        chunk: Rows per forward call.

    Returns:
        ``(gamma, loss)``: memberships ``[n, S]`` (rows sum to 1) and per-row losses ``[n, S]``.
    """
    like = next(iter(clusters.values()))
    s, dtype = like.shape[0], like.dtype
    losses = []
    with eval_mode(module):
        for lo in range(0, x.shape[0], chunk):
            xb, yb = x[lo : lo + chunk].to(like.device, dtype), y[lo : lo + chunk].to(like.device, dtype)
            logits = packed_logits(module, clusters, xb.unsqueeze(0).expand(s, *xb.shape), None)
            losses.append(module.loss_rows(logits.to(dtype), yb.unsqueeze(0).expand(s, -1)).T)
    loss = torch.cat(losses) if losses else like.new_zeros(0, s)
    if temperature == 0:
        hard = torch.nn.functional.one_hot(loss.argmin(1), s)
        return hard.to(torch.float64), loss
    return torch.softmax(-loss.to(torch.float64) / temperature, dim=1), loss


def draw_rows(n: int, width: int, generator: torch.Generator) -> Tensor:
    """One batch of a client: ``min(n, width)`` distinct rows drawn uniformly, padded with ``-1``.

    Returns:
        int64 ``[width]`` row indices (``-1`` marks padding).
    """
    idx = torch.full((width,), -1, dtype=torch.int64)
    take = min(int(n), int(width))
    idx[:take] = torch.randperm(int(n), generator=generator)[:take]
    return idx


def draw_cluster_rows(assign: Tensor, clusters: int, width: int, generator: torch.Generator) -> Tensor:
    """One batch per cluster of a client under hard assignments: cluster ``s`` draws
    ``min(n_s, width)`` distinct rows among the ``n_s`` rows assigned to it, padded with ``-1``.

    Args:
        assign: The cluster of every row ``[n]`` (int64).
        clusters: ``S``.
        width: Batch width.
        generator: The client's batch generator (one ``randperm`` per cluster, in cluster order).

    Returns:
        int64 ``[S, width]`` row indices into the client's rows (``-1``: padding; all ``-1`` for a
        cluster without rows).
    """
    out = torch.full((clusters, width), -1, dtype=torch.int64)
    for s in range(clusters):
        mine = torch.nonzero(assign == s).reshape(-1)
        if len(mine):
            take = min(len(mine), int(width))
            out[s, :take] = mine[torch.randperm(len(mine), generator=generator)[:take]]
    return out


def gather_rows(
    xs: Sequence[Tensor], ys: Sequence[Tensor], idx: Tensor, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor]:
    """Rows ``idx[k]`` of client ``k``'s ``(xs[k], ys[k])``, padded slots zero: ``(x, y, mask)``.

    Args:
        xs, ys: Per-client training rows.
        idx: int64 ``[k, B]`` from :func:`draw_rows` (``-1`` is padding).

    Returns:
        ``x [k, B, ...]``, ``y [k, B]`` and the real-row mask ``[k, B]`` (1 real, 0 padding).
    """
    mask = idx >= 0
    safe = idx.clamp_min(0)
    x = torch.stack([xs[k][safe[k]] for k in range(idx.shape[0])]).to(device, dtype)
    y = torch.stack([ys[k][safe[k]] for k in range(idx.shape[0])]).to(device, dtype)
    return x, y, mask.to(device, dtype)


def weighted_grads(
    module: CenterModule, params: dict[str, Tensor], x: Tensor, y: Tensor, weight: Tensor
) -> tuple[dict[str, Tensor], Tensor]:
    """Gradients of every stacked model's weighted batch loss.

    Model ``p`` minimizes ``L_p = sum_b w_pb l(theta_p; x_pb, y_pb) / sum_b w_pb`` (FedSPD's local update
    of cluster ``s`` on the client's rows of that cluster, Lin et al. 2025 Sec. 3; the weights are the
    real-row mask under hard assignments, the memberships under soft ones). A model whose batch
    carries no weight (``sum_b w_pb = 0``) gets a zero gradient.

    Args:
        module: Model template.
        params: Stacked models ``{name: [P, ...]}``.
        x: Inputs ``[P, B, ...]``.
        y: Labels ``[P, B]``.
        weight: Row weights ``[P, B]`` (0 on padding).

    Returns:
        ``(grads, loss)``: ``{name: [P, ...]}`` and the weighted losses ``L_p`` ``[P]``.
    """
    leaf = {n: t.detach().requires_grad_(True) for n, t in params.items()}
    with eval_mode(module):
        logits = packed_logits(module, leaf, x, None)
    rows = module.loss_rows(logits.to(y.dtype), y)
    total = weight.sum(1)
    loss = (rows * weight).sum(1) / total.clamp_min(_EPS)
    grads = torch.autograd.grad(loss.sum(), list(leaf.values()))
    return dict(zip(leaf, grads, strict=True)), loss.detach()


def weighted_sgd_step(
    module: CenterModule, params: dict[str, Tensor], x: Tensor, y: Tensor, weight: Tensor, lr: float
) -> tuple[dict[str, Tensor], Tensor]:
    """One plain SGD step ``theta_p <- theta_p - lr * grad L_p`` of :func:`weighted_grads`' loss (a
    reference for the hand-computed tests; the algorithm steps with the model's own optimizer).

    Returns:
        The stepped parameters and the weighted losses ``L_p`` ``[P]`` (before the step).
    """
    grads, loss = weighted_grads(module, params, x, y, weight)
    return {n: (t - lr * grads[n]).detach() for n, t in params.items()}, loss


def cluster_average(
    own: dict[str, Tensor],
    own_weight: Tensor,
    received: dict[str, Tensor],
    received_weight: Tensor,
    dst: Tensor,
    cluster: Tensor,
) -> dict[str, Tensor]:
    """Per-cluster aggregation weighted by cluster sizes (FedSPD's neighbourhood averaging, Sec. 3).

    ``theta_is <- (m_is theta_is + sum_{e: dst_e = i, k_e = s} m_e r_e) / (m_is + sum_{e: ...} m_e)``
    where ``m_is`` is client ``i``'s count (membership) of cluster ``s`` and message ``e`` carries one
    cluster model ``r_e`` of its sender, that model's cluster ``k_e`` and the sender's count ``m_e`` of
    it. A cluster with zero total weight at a client keeps the client's own model; one the client
    has no rows of (``m_is = 0``) but its neighbours do becomes their weighted average.

    Args:
        own: Cluster models ``{name: [C, S, ...]}``.
        own_weight: ``m`` ``[C, S]``.
        received: Received cluster models ``{name: [M, ...]}``.
        received_weight: Their senders' counts ``[M]``.
        dst: Receiver of every message ``[M]``.
        cluster: Cluster of every message ``[M]`` (int64).
    """
    c, s = own_weight.shape
    slot = (dst.to(torch.int64) * s + cluster.to(torch.int64)).cpu()
    total = own_weight.to(torch.float64).reshape(-1).clone()
    if len(slot):
        total.index_add_(0, slot.to(total.device), received_weight.reshape(-1).to(total))
    ok = total > 0
    out = {}
    for name, theta in own.items():
        dev, dt = theta.device, theta.dtype
        flat = theta.reshape(c * s, *theta.shape[2:]).to(torch.float64)
        view = (c * s, *([1] * (theta.dim() - 2)))
        acc = flat * own_weight.to(dev, torch.float64).reshape(view)
        if len(slot):
            w_e = received_weight.to(dev, torch.float64).reshape(-1, *view[1:])
            acc = acc.index_add(0, slot.to(dev), received[name].to(dev, torch.float64) * w_e)
        mixed = acc / total.to(dev).clamp_min(_EPS).view(view)
        out[name] = torch.where(ok.to(dev).view(view), mixed, flat).to(dt).reshape(theta.shape)
    return out


def mixture(clusters: dict[str, Tensor], share: Tensor) -> dict[str, Tensor]:
    """Each client's membership-weighted mixture of its cluster models: ``sum_s pi_is theta_is``.

    Args:
        clusters: ``{name: [C, S, ...]}``.
        share: ``pi`` ``[C, S]`` (rows sum to 1).

    Returns:
        ``{name: [C, ...]}``.
    """
    out = {}
    for name, theta in clusters.items():
        view = (*share.shape, *([1] * (theta.dim() - 2)))
        out[name] = (theta.to(torch.float64) * share.to(theta.device, torch.float64).view(view)).sum(1)
        out[name] = out[name].to(theta.dtype)
    return out
