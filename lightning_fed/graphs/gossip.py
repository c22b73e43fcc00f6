"""Gossip over directed edges: send shared parameters along edges, validate, mix what arrived.

Decentralized methods (DeceFL, DeFTA, WPFed) exchange models only between neighbours. Each uses the
same three steps: the directed edges ``src[e] -> dst[e]`` of a graph (:func:`directed_edges`),
one message per edge over the wire with receiver-side validation (:func:`exchange`), and the
row-stochastic mixing ``theta_i <- a_i theta_i + sum_{e: dst_e = i} b_e theta_{src_e}`` applied to
the *received* (decoded) messages (:func:`mix_received`). With lossless encoding and every message
accepted this is exactly :func:`~lightning_fed.aggregation.mixing.mix` with the matrix
``M_ii = a_i``, ``M_{dst_e, src_e} = b_e`` (architecture decision 2), computed edge by edge so a sparse
graph costs ``O(E |W|)`` instead of ``O(C^2 |W|)``, and what a lossy hook or a faulty sender put on
the wire is what gets mixed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.comm.wire import Wire
from lightning_fed.graphs.topology import Graph

__all__ = ["directed_edges", "exchange", "mix_received", "segment_softmax"]


def directed_edges(graph: Graph, available: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Both directions of every edge whose two ends are available: ``(src, dst)``, int64 ``[2E']``."""
    e = graph.edges
    src, dst = torch.cat([e[:, 0], e[:, 1]]), torch.cat([e[:, 1], e[:, 0]])
    if available is not None:
        keep = available[src] & available[dst]
        src, dst = src[keep], dst[keep]
    return src, dst


def exchange(
    wire: Wire, shared: dict[str, Tensor], src: Tensor, dst: Tensor, round_idx: int
) -> tuple[dict[str, Tensor], Tensor, Tensor]:
    """Send ``shared[src[e]]`` to ``dst[e]`` (booked on the ledger) and keep what the receivers accept.

    Each receiver validates its message against its own shared parameters (:meth:`Wire.accept`);
    a rejected message's bytes stay booked but it is dropped.

    Returns:
        The accepted received messages ``{name: [E', ...]}`` and their ``(src, dst)``.
    """
    if not len(src):
        return {n: t[:0] for n, t in shared.items()}, src, dst
    device = next(iter(shared.values())).device
    s, d = src.to(device), dst.to(device)
    received = wire.send({n: t.index_select(0, s) for n, t in shared.items()}, src, dst, round_idx)
    accepted = wire.accept(received, {n: t.index_select(0, d) for n, t in shared.items()}, round_idx)
    if not bool(accepted.all()):
        keep = torch.nonzero(accepted).reshape(-1)
        received = {n: t.index_select(0, keep.to(t.device)) for n, t in received.items()}
        src, dst = src[keep], dst[keep]
    return received, src, dst


def mix_received(
    shared: dict[str, Tensor],
    received: dict[str, Tensor],
    dst: Tensor,
    self_weight: Tensor,
    edge_weight: Tensor,
) -> dict[str, Tensor]:
    """``theta_i <- a_i theta_i + sum_{e: dst_e = i} b_e r_e`` for every shared tensor.

    Args:
        shared: Own shared parameters ``{name: [C, ...]}``.
        received: Received messages ``{name: [E, ...]}``.
        dst: Receiver of every message ``[E]``.
        self_weight: ``a`` ``[C]``.
        edge_weight: ``b`` ``[E]`` (``a_i + sum_{e: dst_e = i} b_e = 1`` for a row-stochastic mix).
    """
    out = {}
    for name, own in shared.items():
        dev, dt = own.device, own.dtype
        view = (-1, *([1] * (own.dim() - 1)))
        mixed = own * self_weight.to(dev, dt).view(view)
        if len(dst):
            mixed = mixed.index_add(0, dst.to(dev), received[name] * edge_weight.to(dev, dt).view(view))
        out[name] = mixed
    return out


def segment_softmax(logits: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """Softmax of ``logits`` within each group: ``exp(l_t) / sum_{s: group_s = group_t} exp(l_s)``.

    Stable (the group maximum is subtracted first); float64.
    """
    logits = logits.to(torch.float64)
    top = torch.full((num_groups,), -torch.inf, dtype=torch.float64)
    top = top.scatter_reduce(0, group, logits, reduce="amax", include_self=True)
    e = (logits - top[group]).exp()
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, group, e)
    return e / total[group]
