"""DisPFL (Dai et al., ICML 2022): decentralized personalized training of sparse sub-networks.

Every client ``k`` owns a personal sparse mask ``m_k`` (density ``d``, 50 % by default, spread over
the layers by :class:`~lightning_fed.algorithms.masks.ERK`; independent random masks at start) and
trains only the weights under it: the engines zero the gradient, the weight and the optimizer state
outside ``m_k`` (:meth:`Algorithm.parameter_mask`). Round ``t`` after the local updates (the
paper's round: send, update the mask, aggregate; :mod:`~lightning_fed.algorithms.masks` has the
formulas, with counts and schedule as in the authors' public release):

1. **Send.** ``k`` sends its trained sparse weights ``w_k`` (zero outside ``m_k``) to each graph
   neighbour: the ``n_l`` active values of every layer plus the mask (2 bits per coordinate), so a
   message costs about ``d`` of a dense one plus the masks.
2. **Mask update** (dynamic sparse training), local: prune the ``ceil(alpha_t n_l)`` active
   weights of smallest ``|w|`` per layer and regrow as many inactive coordinates of largest
   ``|g|``, where ``g`` is the gradient of ``k``'s loss at ``w_k`` on one batch of its own training
   rows (``score_batch_size`` rows drawn with the generator ``(seed, "dispfl-regrow", t, k)``,
   model in eval mode) and ``alpha_t`` the cosine-annealed drop fraction. Layers at density 1 are
   never pruned.
3. **Personalized aggregation**: coordinate-wise average over the clients whose (sent) masks
   cover the coordinate, restricted to the new mask,

       w_k <- m'_k ⊙ (sum_{j in {k} ∪ A_k} w_j) / max(1, sum_{j in {k} ∪ A_k} m_j)

   with ``A_k`` the neighbours whose messages ``k`` accepted. A coordinate regrown by ``k`` thus
   starts from its neighbours' average there (0 where none of them has it).

The graph is a fixed :class:`~lightning_fed.graphs.Topology` (default RR-4) built from the run seed
(``topology``, i.e. ``selector: GraphNeighbours(topology)``); any
:class:`~lightning_fed.selection.PartnerSelector` may choose the partners instead
(``algorithm.init_args.selector``; :mod:`~lightning_fed.algorithms.peers`).
Faults: an unavailable client sends and receives nothing (it still updates its mask and keeps its
own weights under it); a receiver drops a message that :meth:`Wire.accept
<lightning_fed.comm.wire.Wire.accept>` rejects (NaN/Inf or outsized values) or whose mask is
malformed (not bytes, or not exactly ``n_l`` active coordinates): the one exchange path
(:func:`~lightning_fed.comm.exchange.exchange`) with the norm test on the values and the mask test as
its extra receiver-side check; the two sums of step 3 are unit-weight
:func:`~lightning_fed.aggregation.mixing.mix_received` mixes of what arrived. Personal layers
(``personal_layers``) are masked and evolve like the others but are never sent.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import mix_received
from lightning_fed.algorithms.masks import (
    ERK,
    LayerDensity,
    active_counts,
    drop_fraction,
    gradient_regrow,
    magnitude_prune,
    pack_mask,
    prune_count,
    random_masks,
    unpack_mask,
)
from lightning_fed.algorithms.peers import PeerAlgorithm
from lightning_fed.comm.exchange import exchange, rows
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import packed_logits
from lightning_fed.graphs.topology import Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.seeding import torch_generator
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import RoundContext
from lightning_fed.validation import check_int

__all__ = ["DisPFL"]

#: Prefix of the wire entries that carry a layer's packed mask.
MASK = "mask:"
#: Clients whose scoring gradients are computed in one vmapped call.
_CHUNK = 16


class DisPFL(PeerAlgorithm):
    """Decentralized sparse personalized training with masks evolving by prune / regrow (module doc).

    Args:
        topology: The communication graph (default :class:`~lightning_fed.graphs.RandomRegular` of
            degree 4).
        density: Fraction ``d`` of each client's weights that are active (paper: 0.5).
        layer_density: How ``d`` is spread over layers; default :class:`ERK` (DisPFL's default).
        anneal_factor: Drop fraction at round 0 (paper: 0.5), cosine-annealed to 0.
        anneal_rounds: Rounds ``T`` of the cosine schedule (after ``T`` rounds masks stay fixed);
            None (default): the run's ``trainer.rounds``.
        score_batch_size: Training rows per client in the regrowth gradient (one batch).
        personal_layers: Head layers kept local (0 shares everything, as DisPFL does).
        selector: Who exchanges with whom (default ``GraphNeighbours(topology)``); exclusive with
            ``topology``.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        density: float = 0.5,
        layer_density: LayerDensity | None = None,
        anneal_factor: float = 0.5,
        anneal_rounds: int | None = None,
        score_batch_size: int = 128,
        personal_layers: int = 0,
        selector: PartnerSelector | None = None,
    ) -> None:
        super().__init__(topology, selector, personal_layers)
        if not (isinstance(density, int | float) and 0.0 < density <= 1.0):
            raise ValueError(
                f"algorithm.density must be in (0, 1] (fraction of active weights), got {density}"
            )
        if not (isinstance(anneal_factor, int | float) and 0.0 <= anneal_factor <= 1.0):
            raise ValueError(
                f"algorithm.anneal_factor must be in [0, 1] (drop fraction), got {anneal_factor}"
            )
        if layer_density is not None and not isinstance(layer_density, LayerDensity):
            raise ValueError(
                "algorithm.layer_density must be a LayerDensity (lightning_fed.algorithms.masks.ERK or "
                f"Uniform), got {layer_density!r}"
            )
        self.density, self.anneal_factor = float(density), float(anneal_factor)
        self.layer_density = layer_density if layer_density is not None else ERK()
        self.anneal_rounds = (
            None if anneal_rounds is None else check_int("algorithm.anneal_rounds", anneal_rounds, 1)
        )
        self.score_batch_size = check_int("algorithm.score_batch_size", score_batch_size, 1)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        self.module, self.seed = module, int(seed)
        self.train_sets = [(c.x_train, c.y_train) for c in data.centers]
        self.shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
        self.layer_densities = self.layer_density.densities(self.shapes, self.density)
        self.counts = active_counts(self.shapes, self.layer_densities)
        self.sparse_names = tuple(n for n, s in self.shapes.items() if self.counts[n] < math.prod(s))
        self.masks = random_masks(self.shapes, self.counts, self.num_centers, self.seed)
        self._round: dict[str, float] = {}

    def parameter_mask(self) -> dict[str, Tensor]:
        return self.masks

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        first = next(iter(params.values()))
        device = first.device
        old = {n: m.to(device) for n, m in self.masks.items()}
        horizon = self.anneal_rounds if self.anneal_rounds is not None else ctx.rounds
        if horizon is None:
            raise ValueError("algorithm.anneal_rounds: no round budget in the context; set anneal_rounds")
        alpha = drop_fraction(ctx.round, horizon, self.anneal_factor)
        new = self.evolve(params, old, alpha, ctx.round)
        total, count, neighbours = self.exchange(params, old, wire, ctx.round)
        out = {}
        for n, p in params.items():
            value = total[n] / count[n].clamp_min(1.0) if n in total else p
            out[n] = torch.where(new[n], value, torch.zeros((), dtype=p.dtype, device=device))
        changed = sum(int((new[n] & ~old[n]).sum()) for n in self.sparse_names)
        active = sum(self.counts[n] for n in self.sparse_names) * self.num_centers
        self._round = {
            "mean_neighbours": neighbours / self.num_centers,
            "drop_fraction": alpha,
            "mask_regrown_fraction": changed / active if active else 0.0,
        }
        self.masks = {n: m.cpu() for n, m in new.items()}
        return out

    def evolve(
        self, params: dict[str, Tensor], masks: dict[str, Tensor], alpha: float, round_idx: int
    ) -> dict[str, Tensor]:
        """Every client's next mask: magnitude prune then gradient regrow of ``ceil(alpha n_l)`` per layer."""
        if not self.sparse_names or alpha <= 0.0:
            return dict(masks)
        grads = self.scoring_gradients(params, round_idx)
        out = dict(masks)
        c = self.num_centers
        for n in self.sparse_names:
            k = prune_count(self.counts[n], alpha)
            kept = magnitude_prune(masks[n].reshape(c, -1), params[n].reshape(c, -1), k)
            out[n] = gradient_regrow(kept, grads[n].reshape(c, -1), k).view_as(masks[n])
        return out

    def scoring_gradients(self, params: dict[str, Tensor], round_idx: int) -> dict[str, Tensor]:
        """Gradient of each client's mean loss on one batch of its own rows, at its weights ``[C, ...]``.

        Only the sparse layers' gradients are returned (the others are never regrown).
        """
        first = next(iter(params.values()))
        device, dtype = first.device, first.dtype
        c = self.num_centers
        b = min(self.score_batch_size, max(len(y) for _, y in self.train_sets))
        x = torch.zeros(c, b, *self.train_sets[0][0].shape[1:], dtype=dtype)
        y = torch.zeros(c, b, dtype=dtype)
        rows_mask = torch.zeros(c, b, dtype=dtype)
        for i, (xt, yt) in enumerate(self.train_sets):
            rows = torch.randperm(
                len(yt), generator=torch_generator(self.seed, "dispfl-regrow", round_idx, i)
            )
            rows = rows[:b]
            x[i, : len(rows)], y[i, : len(rows)], rows_mask[i, : len(rows)] = xt[rows], yt[rows], 1.0
        x, y, rows_mask = x.to(device), y.to(device), rows_mask.to(device)
        grads = {n: torch.empty_like(params[n]) for n in self.sparse_names}
        was_training = self.module.training
        self.module.eval()
        try:
            with torch.enable_grad():
                for lo in range(0, c, _CHUNK):
                    hi = min(c, lo + _CHUNK)
                    chunk = {n: p[lo:hi].detach() for n, p in params.items()}
                    leaves = [chunk[n].requires_grad_(True) for n in self.sparse_names]
                    logits = packed_logits(self.module, chunk, x[lo:hi], None)
                    per_row = self.module.loss_rows(logits.to(dtype), y[lo:hi]) * rows_mask[lo:hi]
                    loss = (per_row.sum(1) / rows_mask[lo:hi].sum(1).clamp_min(1.0)).sum()
                    for n, g in zip(self.sparse_names, torch.autograd.grad(loss, leaves), strict=True):
                        grads[n][lo:hi] = g
        finally:
            self.module.train(was_training)
        return grads

    def exchange(
        self, params: dict[str, Tensor], masks: dict[str, Tensor], wire: Wire, round_idx: int
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], int]:
        """Send every shared layer's active values and mask to the neighbours; sum what was accepted.

        Returns:
            Per shared layer, the coordinate-wise sums ``sum_j w_j`` and ``sum_j m_j`` over each
            client and the neighbours whose messages it accepted (``[C, ...]``), and the number of
            accepted messages.
        """
        c = self.num_centers
        flat_w = {n: params[n].reshape(c, -1) * masks[n].reshape(c, -1) for n in self.shared_names}
        flat_m = {n: masks[n].reshape(c, -1) for n in self.shared_names}
        values = {n: _active_values(flat_w[n], flat_m[n], self.counts[n]) for n in self.shared_names}
        payload = dict(values)
        payload.update({MASK + n: pack_mask(flat_m[n]) for n in self.sparse_names_shared})
        src, dst = self.round_edges(wire, round_idx)
        got = exchange(
            wire,
            rows(payload, src),
            src,
            dst,
            round_idx,
            own=rows(values, dst),
            checked=lambda r: {n: r[n] for n in self.shared_names},
            valid=self._well_formed,
            anchored=False,
        )
        dense_w, dense_m = {}, {}
        for n in self.shared_names:
            v = got.received[n].to(flat_w[n].dtype)
            if n in self.sparse_names_shared:
                m = unpack_mask(got.received[MASK + n], flat_m[n].shape[1])[0]
                dense_w[n] = torch.zeros(len(v), m.shape[1], dtype=v.dtype, device=v.device)
                dense_w[n][m] = v.reshape(-1)  # row-major: the k-th True of a row gets its k-th value
            else:
                m, dense_w[n] = torch.ones_like(v, dtype=torch.bool), v
            dense_m[n] = m.to(v.dtype)
        # sum_j w_j and sum_j m_j over {k} and A_k: unit-weight mixes of what arrived.
        ones_c = torch.ones(c, dtype=torch.float64)
        ones_e = torch.ones(len(got.dst), dtype=torch.float64)
        total = mix_received(flat_w, dense_w, got.dst, ones_c, ones_e)
        count = mix_received(
            {n: m.to(flat_w[n].dtype) for n, m in flat_m.items()}, dense_m, got.dst, ones_c, ones_e
        )
        shaped = {n: total[n].view_as(params[n]) for n in total}
        return shaped, {n: count[n].view_as(params[n]) for n in count}, len(got.dst)

    def _well_formed(self, received: dict[str, Tensor]) -> Tensor:
        """Bool ``[E]``: every received mask unpacks and has exactly ``n_l`` active coordinates."""
        ok = torch.ones(len(next(iter(received.values()))), dtype=torch.bool)
        for n in self.sparse_names_shared:
            m, well_formed = unpack_mask(received[MASK + n], math.prod(self.shapes[n]))
            ok &= (well_formed & (m.sum(1) == self.counts[n])).cpu()
        return ok

    @property
    def sparse_names_shared(self) -> tuple[str, ...]:
        """Shared layers below density 1 (their masks travel with their values)."""
        return tuple(n for n in self.sparse_names if n in self.shared_names)

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)

    def summary_stats(self) -> dict[str, float]:
        total = sum(math.prod(s) for s in self.shapes.values())
        return {**super().summary_stats(), "density": sum(self.counts.values()) / total}

    def state_dict(self) -> dict[str, Any]:
        return {"masks": {n: m.clone() for n, m in self.masks.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.masks = {n: m.to(torch.bool).cpu().clone() for n, m in state["masks"].items()}


def _active_values(weight: Tensor, mask: Tensor, count: int) -> Tensor:
    """The ``count`` active values of every row ``[C, count]``, in coordinate order."""
    if count == mask.shape[1]:
        return weight
    return weight[mask].view(weight.shape[0], count)
