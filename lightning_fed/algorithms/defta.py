"""DeFTA (Zhou et al. 2022/2024, "DeFTA: A Plug-and-Play Decentralized Replacement for FedAvg").

Decentralized Federated Trusted Averaging: FedAvg without a server. Centers sit on a fixed graph
(:class:`~lightning_fed.graphs.Topology`, default RR-4); each round every center sends its shared
parameters to its neighbours (``2|W|`` per edge) and averages itself and what it received with
sample-count weights scaled by a trust score that the receiver computes locally. DeFTA's trust system
scores a peer by how its model performs on the receiver's own data; here the score is the validation
AUROC ``u_ij`` of neighbour ``j``'s model on center ``i``'s own validation split (with ``i``'s
personal head when ``personal_layers > 0``), evaluated for every (center, neighbour) pair and for
each center's own model in one batched :attr:`RoundContext.val_utility
<lightning_fed.types.RoundContext.val_utility>` call, so no row leaves its center. The update is

    theta_i <- sum_{j in {i} u A_i} w_ij theta_j,
    w_ij = n_j exp(beta u_ij) / sum_{k in {i} u A_i} n_k exp(beta u_ik),

with ``A_i`` the neighbours whose message ``i`` accepted, ``n_j`` the training counts and a NaN
AUROC (one-class validation split) counted as the neutral 0.5. ``beta = 0`` is plain decentralized
FedAvg over the closed neighbourhood; large ``beta`` trusts only the best-scoring models. Trust is
recomputed every round from the current models (no memory across rounds).

Partners: the graph neighbours by default; any :class:`~lightning_fed.selection.PartnerSelector`
may choose them instead (``algorithm.init_args.selector``; :mod:`~lightning_fed.algorithms.peers`),
the trust weights are the same.

Faults: an unavailable center sends and receives nothing and keeps its parameters; a rejected
message (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`) is dropped before scoring, so
the weights are renormalized over ``{i} u A_i``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import MIX_CHUNK_BYTES, mix_received
from lightning_fed.algorithms.peers import PeerAlgorithm
from lightning_fed.comm.exchange import peer_exchange
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.graphs.gossip import segment_softmax
from lightning_fed.graphs.topology import Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import RoundContext

__all__ = ["DeFTA", "scored_mix"]


def scored_mix(
    ctx: RoundContext,
    params: dict[str, Tensor],
    shared: dict[str, Tensor],
    received: dict[str, Tensor],
    dst: Tensor,
    weigh: Callable[[Tensor, Tensor, Tensor], Tensor],
) -> tuple[dict[str, Tensor], Tensor]:
    """Score each receiver's own and received models on its validation split, weigh them, mix.

    The mix of DeFTA (trust weights) and WPFed (rank weights). The receivers are ``centers =
    unique(dst)``; model ``q`` is evaluated on its receiver's validation split in one batched
    :attr:`~lightning_fed.types.RoundContext.val_utility` call: first the own models of ``centers``,
    then message ``e`` (received shared parameters + the receiver's personal head) on ``dst[e]``,
    giving the validation AUROCs ``own_u [len(centers)]`` and ``edge_u [E]`` (float64, NaN where
    undefined). ``weigh(own_u, edge_u, centers)`` turns them into weights (the receivers' own first,
    then the messages'; each receiver's sum to 1) and
    :func:`~lightning_fed.aggregation.mixing.mix_received` applies them (a center that received
    nothing keeps its parameters, self weight 1).

    Returns:
        The mixed shared parameters ``{name: [C, ...]}`` and the self weights ``[C]`` (float64).
    """
    personal = {n: p for n, p in params.items() if n not in shared}
    centers = torch.unique(dst)
    device = next(iter(shared.values())).device
    c, d = centers.to(device), dst.to(device)
    stacked = {n: torch.cat([t.index_select(0, c), received[n]]) for n, t in shared.items()}
    stacked.update({n: torch.cat([t.index_select(0, c), t.index_select(0, d)]) for n, t in personal.items()})
    u = ctx.val_utility(stacked, torch.cat([centers, dst])).to(torch.float64).cpu()
    w = weigh(u[: len(centers)], u[len(centers) :], centers)
    self_w = torch.ones(next(iter(shared.values())).shape[0], dtype=torch.float64)
    self_w[centers] = w[: len(centers)]
    return mix_received(shared, received, dst, self_w, w[len(centers) :], max_bytes=MIX_CHUNK_BYTES), self_w


class DeFTA(PeerAlgorithm):
    """Decentralized FedAvg with AUROC-based trust reweighting of neighbours.

    Args:
        topology: The communication graph (default :class:`~lightning_fed.graphs.RandomRegular`
            of degree 4), built on the centers with the run seed; shorthand for
            ``selector: GraphNeighbours(topology)``.
        beta: Trust temperature: weight ``n_j exp(beta u_ij)`` (>= 0; 0 = sample counts only).
        personal_layers: Head layers kept local (0 shares everything).
        selector: Who exchanges with whom (default ``GraphNeighbours(topology)``); exclusive with
            ``topology``.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        beta: float = 10.0,
        personal_layers: int = 0,
        selector: PartnerSelector | None = None,
    ) -> None:
        super().__init__(topology, selector, personal_layers)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"algorithm.beta must be a finite number >= 0, got {beta}")
        self.beta = float(beta)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        self._round: dict[str, float] = {}

    def weights(self, own_u: Tensor, edge_u: Tensor, src: Tensor, dst: Tensor, centers: Tensor) -> Tensor:
        """Trust weights ``w_ij`` of the own models of ``centers`` then of every message ``e``.

        ``w_ij = n_j exp(beta u_ij) / sum_k n_k exp(beta u_ik)`` over ``{i} u A_i`` (NaN -> 0.5).
        """
        u = torch.nan_to_num(torch.cat([own_u, edge_u]).to(torch.float64), nan=0.5)
        who = torch.cat([centers, src])
        group = torch.cat([centers, dst])
        logits = self.n_train.to(torch.float64)[who].log() + self.beta * u
        return segment_softmax(logits, group, self.num_centers)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = dict(params)
        shared = self.shared(params)
        src, dst = self.round_edges(wire, ctx.round)
        got = peer_exchange(wire, shared, src, dst, ctx.round)
        src, dst = got.src, got.dst
        self._round = {"mean_neighbours": len(dst) / self.num_centers, "mean_self_weight": 1.0}
        if not len(dst):
            return out

        def trust(own_u: Tensor, edge_u: Tensor, centers: Tensor) -> Tensor:
            return self.weights(own_u, edge_u, src, dst, centers)

        mixed, self_w = scored_mix(ctx, params, shared, got.received, dst, trust)
        out.update(mixed)
        self._round["mean_self_weight"] = float(self_w.mean())
        return out

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)
