"""Aggregation as a mixing matrix (docs/architecture.md, decision 2), and the one function that mixes.

Every aggregation rule here is a row-stochastic ``C x C`` matrix ``M`` applied to the stacked
shared parameters: ``theta_i <- sum_j M_ij theta_j``. What a center mixes is what it *received*
over the wire (decoded, validated: :func:`~lightning_fed.comm.exchange.exchange`), so the rules are
applied edge by edge by :func:`mix_received`,

    theta_i <- a_i theta_i + sum_{e: dst_e = i} b_e r_e,

the matrix ``M_ii = a_i``, ``M_{i, src_e} = b_e`` over the messages ``r_e`` that arrived (a sparse
graph costs ``O(E |W|)``, not ``O(C^2 |W|)``; with lossless encoding and every message accepted it is
exactly :func:`mix` with that matrix). ABPS (FedAvg over a center and its partners, Alg. 1 line 25),
DeceFL / DFedAvgM (Metropolis weights), DeFTA (trust weights) and WPFed (rank weights) all mix
through it, differing only in ``a`` and ``b``; :func:`renormalize` turns unnormalized weights into a
row-stochastic mix over what arrived. DisPFL's coordinate-wise average is the ratio of two
unit-weight :func:`mix_received` sums (values and masks). FedAvg's star is the rank-one
``M = 1 w^T`` with ``w_j = n_j / sum_k n_k`` (McMahan et al. 2017): the server computes the one
weighted average ``w^T Theta`` (:func:`weighted_average`, accumulated in float64) and sends it back
over the wire, so every center receives the same model instead of mixing ``C`` messages itself.
Personalized (head) parameters are simply left out of the dict that is mixed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.comm.exchange import rows_per_chunk
from lightning_fed.graphs.topology import metropolis_pair_weights

__all__ = [
    "metropolis_edge_weights",
    "mix",
    "mix_received",
    "renormalize",
    "sample_weights",
    "weighted_average",
]


def sample_weights(n_train: Tensor) -> Tensor:
    """FedAvg weights ``w_j = n_j / sum_k n_k`` (float64)."""
    n = n_train.to(torch.float64)
    if (n < 0).any() or n.sum() <= 0:
        raise ValueError("sample counts must be non-negative with a positive sum")
    return n / n.sum()


#: Bytes of float64 temporaries :func:`weighted_average` makes at once (per block of columns).
AVERAGE_CHUNK_BYTES = 32 * 2**20
#: Its blocks are whole multiples of this many columns: torch's vectorized float64 sum over rows
#: then gives every column the bits of one sum over all columns (checked for 1 and 2 threads,
#: 3-3,680 rows, widths 1-8,192; blocks of other widths can differ in the last bit).
AVERAGE_COLUMN_ALIGN = 64
#: Bytes of received messages the peer methods (DeceFL, DFedAvgM, DeFTA, WPFed) mix at once:
#: :func:`mix_received` groups receivers so that their products ``b_e r_e`` stay under it (the same
#: bits as one call; without it the products are a second copy of every message, 0.9 GB for DeceFL
#: at 3,680 centers).
MIX_CHUNK_BYTES = 64 * 2**20


def weighted_average(params: dict[str, Tensor], weights: Tensor) -> dict[str, Tensor]:
    """``sum_j w_j theta_j`` per tensor, kept with a leading dimension of 1.

    The float64 products are made a block of columns at a time (:data:`AVERAGE_CHUNK_BYTES`, blocks
    aligned to :data:`AVERAGE_COLUMN_ALIGN` columns), not as two float64 copies of the whole
    ``[C, ...]`` tensor (0.46 GB for FedAvg's largest tensor at 3,680 centers, issue 33); each
    column's sum is the one of the whole-tensor sum, bit for bit
    (``tests/aggregation/test_mixing.py``).
    """
    out = {}
    for name, p in params.items():
        flat = p.reshape(p.shape[0], -1)
        w = weights.to(p.device, torch.float64).view(-1, 1)
        align = AVERAGE_COLUMN_ALIGN  # columns per block: the budget over a column's float64 bytes
        cols = max(align, AVERAGE_CHUNK_BYTES // max(1, 8 * flat.shape[0]) // align * align)
        total = torch.empty(flat.shape[1], dtype=torch.float64, device=p.device)
        for lo in range(0, flat.shape[1], cols):
            total[lo : lo + cols] = (w * flat[:, lo : lo + cols].to(torch.float64)).sum(0)
        out[name] = total.view(1, *p.shape[1:]).to(p.dtype)
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


def mix_received(
    shared: dict[str, Tensor],
    received: dict[str, Tensor],
    dst: Tensor,
    self_weight: Tensor,
    edge_weight: Tensor,
    max_bytes: int | None = None,
) -> dict[str, Tensor]:
    """``theta_i <- a_i theta_i + sum_{e: dst_e = i} b_e r_e`` for every shared tensor.

    The weights are cast to each tensor's device and dtype; the sum over a receiver's messages is
    an ``index_add`` in send order.

    With ``max_bytes``, receivers ``[lo, hi)`` with at most that many bytes of incoming messages
    (at least one receiver) are mixed by one call on their own rows and their messages (in send
    order), so each row is computed by the same operations as in one call over everyone, and the
    products ``b_e r_e`` exist for one group at a time.

    Args:
        shared: Own shared parameters ``{name: [C, ...]}``.
        received: Received messages ``{name: [E, ...]}`` (the accepted ones).
        dst: Receiver of every message ``[E]``.
        self_weight: ``a`` ``[C]``.
        edge_weight: ``b`` ``[E]`` (``a_i + sum_{e: dst_e = i} b_e = 1`` for a row-stochastic mix).
        max_bytes: Most bytes of messages mixed at once (None: all).
    """
    chunk = len(dst) if max_bytes is None else rows_per_chunk(received, max_bytes)
    if len(dst) <= chunk:
        return _mix_all(shared, received, dst, self_weight, edge_weight)
    num_centers = len(self_weight)
    out = {n: torch.empty_like(t) for n, t in shared.items()}
    incoming = torch.bincount(dst, minlength=num_centers).cumsum(0)
    lo = 0
    while lo < num_centers:  # the largest group [lo, hi) with <= chunk messages (>= 1 center)
        base = int(incoming[lo - 1]) if lo else 0
        hi = max(lo + 1, int(torch.searchsorted(incoming, base + chunk, right=True)))
        edges = torch.nonzero((dst >= lo) & (dst < hi)).reshape(-1)
        if len(edges) and int(edges[-1] - edges[0]) + 1 == len(edges):  # receiver-major: a view
            theirs = {n: t[int(edges[0]) : int(edges[-1]) + 1] for n, t in received.items()}
        else:
            theirs = {n: t.index_select(0, edges.to(t.device)) for n, t in received.items()}
        part = _mix_all(
            {n: t[lo:hi] for n, t in shared.items()},
            theirs,
            dst[edges] - lo,
            self_weight[lo:hi],
            edge_weight[edges],
        )
        for name, t in part.items():
            out[name][lo:hi] = t
        lo = hi
    return out


def _mix_all(
    shared: dict[str, Tensor],
    received: dict[str, Tensor],
    dst: Tensor,
    self_weight: Tensor,
    edge_weight: Tensor,
) -> dict[str, Tensor]:
    """:func:`mix_received` in one call."""
    out = {}
    for name, own in shared.items():
        dev, dt = own.device, own.dtype
        view = (-1, *([1] * (own.dim() - 1)))
        mixed = own * self_weight.to(dev, dt).view(view)
        if len(dst):
            mixed = mixed.index_add(0, dst.to(dev), received[name] * edge_weight.to(dev, dt).view(view))
        out[name] = mixed
    return out


def renormalize(self_weight: Tensor, edge_weight: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """Row-normalized weights over what arrived: ``(a_i / s_i, b_e / s_{dst_e})``.

    ``s_i = a_i + sum_{e: dst_e = i} b_e``, so a receiver whose messages were partly rejected (or who
    has no partner) renormalizes over itself and what it accepted.

    Args:
        self_weight: Unnormalized ``a`` ``[C]`` (float64; positive).
        edge_weight: Unnormalized ``b`` ``[E]``.
        dst: Receiver of every message ``[E]``.
    """
    total = self_weight.clone().index_add_(0, dst, edge_weight)
    return self_weight / total, edge_weight / total[dst]


def metropolis_edge_weights(
    src: Tensor, dst: Tensor, got_src: Tensor, got_dst: Tensor, num_centers: int
) -> tuple[Tensor, Tensor]:
    """Unnormalized Metropolis weights (Xiao & Boyd 2004) of a round's partner graph, edge by edge.

    The round's graph is the directed edges ``(src, dst)`` a selector chose (both directions of every
    partnership), with degrees ``d_i = |{e: dst_e = i}|``. Its Metropolis matrix has
    ``W_ij = 1 / (1 + max(d_i, d_j))`` on the edges and ``W_ii = 1 - sum_{j != i} W_ij``; returned
    are ``W_ii`` ``[C]`` and ``W_{dst_e, src_e}`` for the messages that arrived
    (``(got_src, got_dst)``, a subset of the edges), for :func:`renormalize`. For a fixed graph the
    graph methods use the whole graph's weights instead (:func:`~lightning_fed.graphs.metropolis_self_weights`
    and :func:`~lightning_fed.graphs.metropolis_pair_weights`; an unavailable neighbour's weight is
    then renormalized away, as DeceFL always did).

    Returns:
        float64 ``(self_weight [C], edge_weight [E'])``.
    """
    deg = torch.bincount(dst, minlength=num_centers)
    chosen = metropolis_pair_weights(deg, src, dst)
    self_weight = 1.0 - torch.zeros(num_centers, dtype=torch.float64).index_add_(0, dst, chosen)
    return self_weight, metropolis_pair_weights(deg, got_src, got_dst)
