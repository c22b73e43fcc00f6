"""Shapley credit for every center's partners, in batched forward passes (ABPS Eq. 4).

For center ``i`` with partners ``P_i`` (the players), the utility of a coalition ``S ⊆ P_i`` is
``U_i(S)``: center ``i``'s validation AUROC of the model ``FedAvg({theta_i} ∪ {theta_j : j ∈ S})``
(sample-weighted; ``theta_j`` as ``i`` received it over the wire, ``i``'s own head when heads are
personal). ``U_i(∅)`` is ``i``'s own model. Shapley values are exact over all ``2^m`` coalitions
when ``m = |P_i| <= exact_max`` and truncated Monte Carlo over ``num_permutations`` random
permutations otherwise.

All centers' coalitions are evaluated together: coalition models are rows of a sparse
coefficient matrix times the stacked parameters ``[own models; received models]``, evaluated in
chunks by the federation's ``val_utility`` (one packed forward and one batched AUROC per chunk).

Undefined utility: a center whose validation split has a single class has no AUROC, so every
``U_i`` is NaN and its Shapley values are undefined; such a center makes no observation that
round (its posterior is left unchanged: no information is not evidence of zero utility).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.shapley import (
    coalitions_exact,
    exact_shapley_batched,
    tmc_masks,
    tmc_permutations,
    tmc_shapley,
)
from lightning_fed.types import RoundContext

__all__ = ["ShapleyCredit"]


class ShapleyCredit:
    """Compute ``phi_{j->i}`` for every active pair of a round.

    Args:
        exact_max: Largest number of partners for exact Shapley (paper: 5).
        num_permutations: TMC permutations above that (paper: 8).
        truncation_tol: TMC truncation tolerance (0: no truncation, unbiased).
    """

    def __init__(self, exact_max: int = 5, num_permutations: int = 8, truncation_tol: float = 0.0) -> None:
        if exact_max < 0:
            raise ValueError(f"shapley.exact_max must be >= 0, got {exact_max}")
        if num_permutations < 1:
            raise ValueError(f"shapley.num_permutations must be >= 1, got {num_permutations}")
        self.exact_max, self.num_permutations, self.truncation_tol = (
            exact_max,
            num_permutations,
            truncation_tol,
        )

    def __call__(
        self,
        ctx: RoundContext,
        partners: list[list[int]],
        own: dict[str, Tensor],
        received: dict[str, Tensor],
        edges: tuple[Tensor, Tensor],
        n_train: Tensor,
        personal: dict[str, Tensor],
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Shapley values of every (receiver i, partner j) pair.

        Args:
            ctx: The round context (its ``val_utility`` evaluates models on centers' val splits).
            partners: ``P_i`` per center.
            own: Each center's shared parameters ``[C, ...]`` (before aggregation).
            received: Decoded shared parameters per directed edge ``[E, ...]``.
            edges: ``(src, dst)`` of those edges.
            n_train: Training sizes ``[C]`` (FedAvg weights).
            personal: Each center's personal (head) parameters ``[C, ...]`` (may be empty).

        Returns:
            ``(i, j, phi)``: receivers, partners and Shapley values of the defined pairs.
        """
        src, dst = edges
        c = n_train.shape[0]
        edge_of = {(d, s): e for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
        gen = torch_generator(ctx.seed, "shapley", ctx.round)
        n = n_train.to(torch.float64).tolist()
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        centers: list[int] = []
        plans = []  # per active center: (i, players, masks, permutations or None, first row)
        for i, players in enumerate(partners):
            m = len(players)
            if m == 0:
                continue
            perms = None if m <= self.exact_max else tmc_permutations(m, self.num_permutations, gen)
            masks = coalitions_exact(m) if perms is None else tmc_masks(perms)
            plans.append((i, players, masks, perms, len(centers)))
            for mask in masks:
                # Coalition model: own model (column i) + received models (column C + edge index).
                terms = [(i, n[i])] + [
                    (c + edge_of[(i, players[k])], n[players[k]]) for k in range(m) if mask >> k & 1
                ]
                total = sum(w for _, w in terms)
                rows += [len(centers)] * len(terms)
                cols += [col for col, _ in terms]
                vals += [w / total for _, w in terms]
                centers.append(i)
        if not centers:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty, torch.zeros(0, dtype=torch.float64)
        centers_t = torch.tensor(centers)
        shape = (len(centers), c + len(src))
        with torch.sparse.check_sparse_tensor_invariants(enable=True):
            coeff = torch.sparse_coo_tensor(torch.tensor([rows, cols]), torch.tensor(vals), shape).coalesce()
        params = {}
        for name, p in own.items():
            stacked = torch.cat([p, received[name]]).reshape(c + len(src), -1)
            mixed = torch.sparse.mm(coeff.to(stacked.dtype), stacked)
            params[name] = mixed.reshape(len(centers), *p.shape[1:])
        params.update({name: p.index_select(0, centers_t.to(p.device)) for name, p in personal.items()})
        utility = ctx.val_utility(params, centers_t)
        return self._values(plans, utility)

    def _values(self, plans: list, utility: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out_i, out_j, out_phi = [], [], []
        for i, players, masks, perms, first in plans:
            u = utility[first : first + len(masks)]
            if torch.isnan(u).any():
                continue  # undefined AUROC on i's validation split: no observation this round
            if perms is None:
                phi = exact_shapley_batched(u.unsqueeze(0)).squeeze(0)
            else:
                phi = tmc_shapley(dict(zip(masks, u.tolist(), strict=True)), perms, self.truncation_tol)
            out_i += [i] * len(players)
            out_j += players
            out_phi.append(phi.to(torch.float64))
        if not out_phi:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty, torch.zeros(0, dtype=torch.float64)
        return torch.tensor(out_i), torch.tensor(out_j), torch.cat(out_phi)
