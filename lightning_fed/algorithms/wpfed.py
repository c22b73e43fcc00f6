"""WPFed (Ye et al. 2024, "WPFed: Web-based Personalized Federation for Decentralized Systems").

Every center picks its own neighbours each round from the whole federation, by output similarity
found with locality-sensitive hashing, and mixes them by their local performance ranking:

1. *Reference outputs.* A reference batch ``X_ref`` of ``reference_size`` points is drawn once from
   ``N(0, I)`` in (standardized) feature space, seeded from the run seed, so no patient row leaves a
   center. Center ``i`` computes its model's logits ``o_i = f_i(X_ref)`` (eval mode) and, with
   ``centered``, subtracts their mean so the code reflects the shape of the function, not its base
   rate (the cosine of centered outputs is their Pearson correlation).
2. *LSH codes.* ``h_i = 1[H o_i > 0]`` with ``H`` ``[bits, reference_size]`` random Gaussian
   hyperplanes shared by all centers (one seeded draw): ``P(h_ib != h_jb) = angle(o_i, o_j) / pi``
   (Charikar 2002). Every available center sends its code to every other (``bits`` bytes per
   message as bools, all-to-all), and these small messages are booked on the ledger.
3. *Neighbour choice.* Center ``i`` takes the ``neighbours`` centers whose received codes are
   nearest to its own in Hamming distance (ties by lower id) and pulls their shared parameters
   (one model message per chosen pair, booked; the relation is directed).
4. *Ranking weights.* Center ``i`` scores its own model and each accepted neighbour model (with
   ``i``'s personal head) by AUROC on its own validation split (one batched :attr:`val_utility
   <lightning_fed.types.RoundContext.val_utility>` call; NaN -> 0.5), ranks ``{i} u A_i`` by score
   (rank 1 = best; ties: own model first, then lower sender id), and mixes
   ``theta_i <- sum_{j in {i} u A_i} w_ij theta_j`` with ``w_ij = (1 / r_ij) / sum_k (1 / r_ik)``.

The original WPFed distils neighbours' outputs on reference data into the personal model and
verifies rankings with announcements; here, as in the ABPS comparison (Sec. 6.2), the selected
neighbours are combined by parameter mixing with the ranking weights above.

A :class:`~lightning_fed.selection.PartnerSelector` (``algorithm.init_args.selector``, e.g.
:class:`~lightning_fed.selection.GraphNeighbours` or :class:`~lightning_fed.selection.RandomPartners`)
may replace steps 2-3: the centers then pull the models of the selector's partners (both directions
of every partnership; no codes are sent) and mix them by the ranking weights of step 4, so WPFed's
ranking can be compared with any choice of partners. The LSH choice itself stays inside WPFed (the
default, ``selector: null``): it reads the models' outputs, which a selector does not see.

Faults: an unavailable center sends and receives neither codes nor models and keeps its
parameters; a center only considers peers whose code it received and accepted; a rejected model
message (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`) is dropped before ranking.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.algorithms.defta import scored_mix
from lightning_fed.comm.exchange import exchange, peer_exchange
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import packed_logits
from lightning_fed.models.base import CenterModule
from lightning_fed.seeding import torch_generator
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import RoundContext

__all__ = ["WPFed", "lsh_codes", "nearest_by_hamming", "rank_weights"]


def lsh_codes(outputs: Tensor, planes: Tensor, centered: bool = True) -> Tensor:
    """Random-hyperplane LSH: bool ``[C, bits]`` codes ``1[H o_i > 0]`` of outputs ``[C, R]``."""
    o = outputs.to(torch.float64)
    if centered:
        o = o - o.mean(1, keepdim=True)
    return (o @ planes.to(o.device, torch.float64).T > 0).cpu()


def nearest_by_hamming(own: Tensor, received: Tensor, src: Tensor, dst: Tensor, k: int) -> Tensor:
    """Bool ``[E]``: message ``e`` is among the ``k`` codes nearest to receiver ``dst[e]``'s own code.

    Args:
        own: Every center's own code ``[C, bits]``.
        received: The code of message ``e`` ``[E, bits]`` (sent by ``src[e]`` to ``dst[e]``).
        src: Senders ``[E]``.
        dst: Receivers ``[E]``.
        k: Neighbours per receiver (all of them when fewer arrived); ties go to the lower id.
    """
    if not len(src):
        return torch.zeros(0, dtype=torch.bool)
    c, bits = own.shape
    dist = (received.cpu() != own[dst]).sum(1).to(torch.int64)
    key = (dst * (bits + 1) + dist) * c + src
    order = torch.argsort(key)
    counts = torch.bincount(dst, minlength=c)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order)) - start[dst[order]]
    return rank < k


def rank_weights(scores: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """Inverse-rank weights within each group: ``w_t = (1 / r_t) / sum_{s in group} (1 / r_s)``.

    ``r_t`` is the 1-based rank of ``scores[t]`` (descending; NaN -> 0.5) within its group; equal
    scores are ranked in the order the entries are listed (the caller lists own models first, then
    messages by sender id).
    """
    s = torch.nan_to_num(scores.to(torch.float64), nan=0.5)
    n = len(s)
    # Lexicographic sort by (group, -score, position): stable sorts from the last key to the first.
    order = torch.argsort(-s, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    counts = torch.bincount(group, minlength=num_groups)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.float64)
    rank[order] = (torch.arange(n) - start[group[order]] + 1).to(torch.float64)
    inv = 1.0 / rank
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, group, inv)
    return inv / total[group]


class WPFed(Algorithm):
    """LSH-selected neighbours mixed by local performance ranking.

    Args:
        neighbours: Neighbours each center pulls per round, ``k`` (1 <= k < number of centers).
        bits: LSH code length (hyperplanes).
        reference_size: Points in the Gaussian reference batch.
        centered: Subtract each model's mean reference logit before hashing.
        personal_layers: Head layers kept local (0 shares everything).
        selector: Who pulls whose model (default None: the LSH choice of ``neighbours`` peers,
            steps 2-3 of the module docstring); a selector's partners are mixed by the same ranks.
    """

    def __init__(
        self,
        neighbours: int = 4,
        bits: int = 64,
        reference_size: int = 256,
        centered: bool = True,
        personal_layers: int = 0,
        selector: PartnerSelector | None = None,
    ) -> None:
        super().__init__(personal_layers)
        self.selector = selector
        for name, value in (("neighbours", neighbours), ("bits", bits), ("reference_size", reference_size)):
            if int(value) < 1:
                raise ValueError(f"algorithm.{name} must be >= 1, got {value}")
        self.neighbours, self.bits, self.reference_size = int(neighbours), int(bits), int(reference_size)
        self.centered = bool(centered)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        if self.selector is not None:
            self.selector.setup(data.metadata(), seed)
        elif self.neighbours >= self.num_centers:
            raise ValueError(
                f"algorithm.neighbours={self.neighbours} must be < data.num_centers={self.num_centers} "
                "(a center cannot pull more peers than exist); lower algorithm.neighbours"
            )
        self.module = module
        gen = torch_generator(seed, "wpfed_reference")
        self.reference = torch.randn(
            self.reference_size, data.num_features, generator=gen, dtype=torch.float64
        )
        gen = torch_generator(seed, "wpfed_hyperplanes")
        self.planes = torch.randn(self.bits, self.reference_size, generator=gen, dtype=torch.float64)
        self._round: dict[str, float] = {}

    @torch.no_grad()
    def reference_outputs(self, params: dict[str, Tensor]) -> Tensor:
        """Every center's logits on the reference batch ``[C, reference_size]`` (eval mode, no dropout)."""
        first = next(iter(params.values()))
        c = first.shape[0]
        x = self.reference.to(first.device, first.dtype).expand(c, *self.reference.shape)
        was_training = self.module.training
        self.module.eval()
        try:
            return packed_logits(self.module, params, x, None)
        finally:
            self.module.train(was_training)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = dict(params)
        c = self.num_centers
        centers = torch.arange(c)[wire.available(ctx.round, c)]
        self._round = {"mean_neighbours": 0.0, "mean_code_distance": 0.0}
        if len(centers) < 2:
            return out
        if self.selector is None:
            src, dst, dist = self._lsh_choice(ctx, params, wire, centers)
        else:
            src, dst = self.selector.edges(ctx.round, wire.available(ctx.round, c))
            dist = torch.zeros(0)
        shared = self.shared(params)
        models = peer_exchange(wire, shared, src, dst, ctx.round)
        dst = models.dst
        self._round = {
            "mean_neighbours": len(dst) / c,
            "mean_code_distance": float(dist.double().mean()) if len(dist) else 0.0,
        }
        if not len(dst):
            return out

        def by_rank(own_u: Tensor, edge_u: Tensor, active: Tensor) -> Tensor:
            return rank_weights(torch.cat([own_u, edge_u]), torch.cat([active, dst]), c)

        out.update(scored_mix(ctx, params, shared, models.received, dst, by_rank)[0])
        return out

    def _lsh_choice(
        self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire, centers: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Steps 2-3: codes all-to-all among ``centers``, each receiver's ``neighbours`` nearest.

        Returns:
            The chosen directed pairs ``(src, dst)`` and their code distances.
        """
        codes = lsh_codes(self.reference_outputs(params), self.planes, self.centered)
        pairs = torch.cartesian_prod(centers, centers)
        src, dst = pairs[:, 0][pairs[:, 0] != pairs[:, 1]], pairs[:, 1][pairs[:, 0] != pairs[:, 1]]
        got = exchange(wire, {"code": codes[src]}, src, dst, ctx.round)
        src, dst, got_codes = got.src, got.dst, got.received["code"].bool().cpu()
        chosen = nearest_by_hamming(codes, got_codes, src, dst, self.neighbours)
        dist = (got_codes != codes[dst]).sum(1)[chosen]
        return src[chosen], dst[chosen], dist

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)
