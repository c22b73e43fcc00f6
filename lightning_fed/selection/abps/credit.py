"""Shapley credit for every center's partners, in batched forward passes (ABPS Eq. 4).

For center ``i`` with partners ``P_i`` (the players), the utility of a coalition ``S ⊆ P_i`` is
``U_i(S)``: center ``i``'s validation AUROC of the model ``FedAvg({theta_i} ∪ {theta_j : j ∈ S})``
(sample-weighted; ``theta_j`` as ``i`` received it over the wire, ``i``'s own head when heads are
personal). ``U_i(∅)`` is ``i``'s own model. Shapley values are exact over all ``2^m`` coalitions
when ``m = |P_i| <= exact_max`` and truncated Monte Carlo over ``num_permutations`` random
permutations otherwise.

Coalition models are rows of a sparse coefficient matrix times the stacked parameters
``[own models; received models]``: row ``(i, S)`` holds ``n_i / N_S`` on ``theta_i`` and ``n_j / N_S``
on each ``theta_j``, ``j in S``, with ``N_S = n_i + sum_{j in S} n_j``. The coefficients of every
center's coalitions are built at once (vectorized over centers; ``N_S`` is summed own weight first,
then the partners in ``P_i`` order, as a Python sum would). The models are then built and evaluated
in chunks of at most :attr:`ShapleyCredit.chunk_bytes` of coalition parameters (issue 17: all
coalitions at once were ``8 x 3,680`` models, 1.9 GB, at 3,680 centers with ``kappa = 3``); each
chunk is its rows of the coefficient matrix times only the parameter rows they use, evaluated by
the federation's ``val_utility`` (one packed forward and one batched AUROC per 256 models). Every
row of a sparse product is accumulated from its own entries in their order, and ``val_utility``
scores each model on its own center's split, so the chunked values are those of one big batch bit
for bit (``tests/selection/test_shapley.py`` compares them).

Why chunks of 16 MiB (issue 33): glibc's ``malloc`` hands out blocks above its ``mmap`` threshold
(at most 32 MiB on 64-bit Linux) as fresh mappings, and every 4 KiB page of a fresh mapping faults
on first touch, so each 128 MiB chunk of before cost 32,768 page faults to fill. Blocks below the
threshold come from the heap and reuse pages freed by the previous chunk. Measured at 3,680 centers
(ABPS under ``NormBound``, 1 thread): 1.5 M page faults per aggregation with 128 MiB chunks,
0.44 M with 16 MiB; the Shapley credit's seconds per round (2 threads, 3 runs alternated, medians)
fell from 4.88 s to 2.01 s in one pass and from 3.01 s to 1.82 s in passes of 460 centers
(``benchmarks/scale_centers.py --shapley-chunk-mb``; docs/benchmarks.md). The values do not
depend on the chunk size (above).

Undefined utility: a center whose validation split has a single class has no AUROC, so every
``U_i`` is NaN and its Shapley values are undefined; such a center makes no observation that
round (its posterior is left unchanged: no information is not evidence of zero utility).

The utility (issue 30, ``utility``): ``auroc`` is the paper's (the default; the call is the one of
before, so every run is unchanged); ``log_likelihood`` is the geometric-mean likelihood
``exp(mean_k log p(y_k | x_k))`` of the receiver's validation rows and ``brier`` is ``1 -`` their
Brier score (:mod:`lightning_fed.metrics.likelihood`: both in ``[0, 1]``, derivation of the map
there). Both are defined on every non-empty split, so the centers whose split has no positive
(or no negative), which never observe under the AUROC, observe every round they have partners.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.shapley import (
    exact_shapley_batched,
    tmc_masks,
    tmc_permutations,
    tmc_shapley,
)
from lightning_fed.types import RoundContext

__all__ = ["UTILITIES", "Coalitions", "ShapleyCredit", "coalition_coefficients"]

#: The coalition utilities ``U_i(S)`` a :class:`ShapleyCredit` can use (module docstring).
UTILITIES: tuple[str, ...] = ("auroc", "log_likelihood", "brier")


@dataclass(frozen=True)
class Coalitions:
    """Every coalition of a round and its coefficient row, as flat tensors.

    Attributes:
        centers: Active centers (those with partners), ascending ``[A]``.
        players: ``P_i`` of each active center (list of ``A`` lists).
        permutations: TMC permutations of each active center (None where exact).
        masks: TMC masks of each active center (None where exact: ``0 .. 2^m - 1``).
        first: First coalition row of each active center ``[A]``; its rows are contiguous.
        rows: Coalition rows per active center ``[A]``.
        center: Evaluating center of each coalition row ``[Q]``.
        entry_row: Row of each coefficient entry, ascending ``[nnz]``.
        entry_col: Column of each entry (``i`` for ``theta_i``, ``C + e`` for received message ``e``).
        entry_value: Coefficient of each entry (float64), ``(row, col)``-sorted.
    """

    centers: Tensor
    players: list[list[int]]
    permutations: list[Tensor | None]
    masks: list[list[int] | None]
    first: Tensor
    rows: Tensor
    center: Tensor
    entry_row: Tensor
    entry_col: Tensor
    entry_value: Tensor


def coalition_coefficients(
    partners: list[list[int]],
    edges: tuple[Tensor, Tensor],
    n_train: Tensor,
    exact_max: int,
    num_permutations: int,
    generator: torch.Generator,
) -> Coalitions:
    """Coalitions of every center with partners and their FedAvg coefficients (module docstring).

    A center with ``m <= exact_max`` partners has the ``2^m`` coalitions ``0 .. 2^m - 1`` (bitmask
    over ``P_i``); one with more draws its TMC permutations from ``generator``, centers in ascending
    order, and has the unique prefix coalitions (:func:`~lightning_fed.selection.abps.shapley.
    tmc_masks`).

    Args:
        partners: ``P_i`` per center (accepted partners; ``j in P_i`` needs an edge ``j -> i``).
        edges: ``(src, dst)`` of the received messages; a repeated edge resolves to its last
            occurrence.
        n_train: Training sizes ``[C]`` (the FedAvg weights).
        exact_max: Largest ``m`` solved exactly.
        num_permutations: TMC permutations per center above that.
        generator: The round's Shapley generator.

    Raises:
        KeyError: If a partner has no edge into its center.
    """
    c = int(n_train.shape[0])
    src = torch.as_tensor(edges[0]).reshape(-1).to("cpu", torch.int64)
    dst = torch.as_tensor(edges[1]).reshape(-1).to("cpu", torch.int64)
    n = n_train.to("cpu", torch.float64).reshape(-1)
    active = [(i, list(players)) for i, players in enumerate(partners) if players]
    centers = torch.tensor([i for i, _ in active], dtype=torch.int64)
    m = torch.tensor([len(p) for _, p in active], dtype=torch.int64)
    perms: list[Tensor | None] = []
    tmc: list[list[int] | None] = []
    for _, players in active:  # TMC draws in ascending center order
        if len(players) <= exact_max:
            perms.append(None)
            tmc.append(None)
        else:
            perms.append(tmc_permutations(len(players), num_permutations, generator))
            tmc.append(tmc_masks(perms[-1]))
    rows = torch.tensor([1 << len(p) if q is None else len(q) for (_, p), q in zip(active, tmc, strict=True)])
    rows = rows.to(torch.int64).reshape(-1)
    first = torch.cumsum(rows, 0) - rows
    num = int(rows.sum())
    owner = torch.repeat_interleave(torch.arange(len(active)), rows)  # active index of each row
    mask = torch.arange(num) - first[owner]  # exact centers: coalition q of i is bitmask q
    for a, masks in enumerate(tmc):
        if masks is not None:
            mask[int(first[a]) : int(first[a] + rows[a])] = torch.tensor(masks, dtype=torch.int64)

    # Edge e_{i,k} that carried theta_{P_i[k]} to i (the last such edge, as a dict lookup keeps).
    width = int(m.max()) if len(active) else 0
    slot_owner = torch.repeat_interleave(torch.arange(len(active)), m)
    slot = torch.arange(int(m.sum())) - (torch.cumsum(m, 0) - m)[slot_owner]
    player = torch.tensor([j for _, p in active for j in p], dtype=torch.int64)
    order = torch.argsort(dst * c + src, stable=True)
    keys = (dst * c + src)[order]
    wanted = centers[slot_owner] * c + player
    at = torch.searchsorted(keys, wanted, right=True) - 1
    inside = at >= 0
    found = torch.zeros_like(inside)
    found[inside] = keys[at[inside]] == wanted[inside]
    if not bool(found.all()):
        bad = int(torch.nonzero(~found)[0])
        raise KeyError((int(centers[slot_owner[bad]]), int(player[bad])))
    edge = torch.full((len(active), width), -1, dtype=torch.int64)
    weight = torch.zeros(len(active), width, dtype=torch.float64)
    edge[slot_owner, slot] = order[at]
    weight[slot_owner, slot] = n[player]

    center = centers[owner]
    total = n[center]  # N_S: own weight first, then the members in P_i order (a Python sum's order)
    member = [((mask >> k) & 1).bool() for k in range(width)]
    for k in range(width):
        total = total + torch.where(member[k], weight[owner, k], 0.0)
    row_ids = [torch.arange(num)]
    cols = [center]
    values = [n[center] / total]
    for k in range(width):
        q = torch.nonzero(member[k]).reshape(-1)
        row_ids.append(q)
        cols.append(c + edge[owner[q], k])
        values.append(weight[owner[q], k] / total[q])
    entry_row, entry_col, entry_value = torch.cat(row_ids), torch.cat(cols), torch.cat(values)
    sort = torch.argsort(entry_row * (c + len(src) + 1) + entry_col)
    return Coalitions(
        centers=centers,
        players=[p for _, p in active],
        permutations=perms,
        masks=tmc,
        first=first,
        rows=rows,
        center=center,
        entry_row=entry_row[sort],
        entry_col=entry_col[sort],
        entry_value=entry_value[sort],
    )


class ShapleyCredit:
    """Compute ``phi_{j->i}`` for every active pair of a round.

    Args:
        exact_max: Largest number of partners for exact Shapley (paper: 5).
        num_permutations: TMC permutations above that (paper: 8).
        truncation_tol: TMC truncation tolerance (0: no truncation, unbiased).
        utility: The coalition utility on the receiver's validation split: ``auroc`` (the paper's,
            default), ``log_likelihood`` (geometric-mean likelihood) or ``brier`` (``1 -`` Brier).

    Attributes:
        chunk_bytes: Most bytes of coalition parameters (shared and personal) built and evaluated at
            once (default 16 MiB, about 260 MortalityMLP models: below glibc's largest ``mmap``
            threshold, module docstring); a class attribute, not a config key: it changes the
            memory and the speed, not the values.
    """

    chunk_bytes: int = 16 * 2**20

    def __init__(
        self,
        exact_max: int = 5,
        num_permutations: int = 8,
        truncation_tol: float = 0.0,
        utility: str = "auroc",
    ) -> None:
        if exact_max < 0:
            raise ValueError(f"shapley.exact_max must be >= 0, got {exact_max}")
        if num_permutations < 1:
            raise ValueError(f"shapley.num_permutations must be >= 1, got {num_permutations}")
        if utility not in UTILITIES:
            raise ValueError(
                "algorithm.init_args.shapley.init_args.utility must be one of "
                f"{list(UTILITIES)}, got {utility!r}"
            )
        self.utility = utility
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
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Shapley values of every (receiver i, partner j) pair.

        The receivers may be credited in several calls, each with the partners of an ascending range
        of receivers (the others' ``P_i`` empty), the messages into that range and one
        :meth:`generator` passed to every call: the TMC permutations are then drawn in the same
        order, and every coalition utility and value is the one call's (each model is evaluated on
        its own), so the concatenated results are the bits of one call over every receiver.

        Args:
            ctx: The round context (its ``val_utility`` evaluates models on centers' val splits).
            partners: ``P_i`` per center.
            own: Each center's shared parameters ``[C, ...]`` (before aggregation).
            received: Decoded shared parameters per directed edge ``[E, ...]``.
            edges: ``(src, dst)`` of those edges.
            n_train: Training sizes ``[C]`` (FedAvg weights).
            personal: Each center's personal (head) parameters ``[C, ...]`` (may be empty).
            generator: The round's TMC generator (None: a new :meth:`generator`).

        Returns:
            ``(i, j, phi)``: receivers, partners and Shapley values of the defined pairs.
        """
        c = int(n_train.shape[0])
        gen = self.generator(ctx) if generator is None else generator
        plan = coalition_coefficients(partners, edges, n_train, self.exact_max, self.num_permutations, gen)
        num = len(plan.center)
        if not num:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty, torch.zeros(0, dtype=torch.float64)
        per_model = sum(p[0].numel() * p.element_size() for p in (*own.values(), *personal.values()))
        chunk = max(1, self.chunk_bytes // max(1, per_model))
        bounds = torch.searchsorted(plan.entry_row, torch.arange(0, num + chunk, chunk).clamp(max=num))
        utility = torch.empty(num, dtype=torch.float64)
        for k, lo in enumerate(range(0, num, chunk)):
            hi = min(num, lo + chunk)
            e0, e1 = int(bounds[k]), int(bounds[k + 1])
            used, column = torch.unique(plan.entry_col[e0:e1], return_inverse=True)
            own_rows, edge_rows = used[used < c], used[used >= c] - c
            index = torch.stack([plan.entry_row[e0:e1] - lo, column])
            with torch.sparse.check_sparse_tensor_invariants(enable=True):
                coeff = torch.sparse_coo_tensor(index, plan.entry_value[e0:e1], (hi - lo, len(used)))
                coeff = coeff.coalesce()
            centers = plan.center[lo:hi]
            params = {}
            for name, p in own.items():
                stacked = torch.cat(
                    [
                        p.index_select(0, own_rows.to(p.device)),
                        received[name].index_select(0, edge_rows.to(p.device)),
                    ]
                ).reshape(len(used), -1)
                mixed = torch.sparse.mm(coeff.to(device=stacked.device, dtype=stacked.dtype), stacked)
                params[name] = mixed.reshape(hi - lo, *p.shape[1:])
            params.update({name: p.index_select(0, centers.to(p.device)) for name, p in personal.items()})
            if self.utility == "auroc":  # the call of before (a hand-built context may take 2 arguments)
                values = torch.as_tensor(ctx.val_utility(params, centers))
            else:
                values = torch.as_tensor(ctx.val_utility(params, centers, metric=self.utility))
            utility[lo:hi] = values.reshape(-1).to("cpu", torch.float64)
            del params
        return self._values(plan, utility)

    @staticmethod
    def generator(ctx: RoundContext) -> torch.Generator:
        """The round's generator of TMC permutations (keyed by the run seed and the round)."""
        return torch_generator(ctx.seed, "shapley", ctx.round)

    def _values(self, plan: Coalitions, utility: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Exact or TMC Shapley values per active center; a center with a NaN utility is skipped."""
        owner = torch.repeat_interleave(torch.arange(len(plan.centers)), plan.rows)
        undefined = torch.zeros(len(plan.centers), dtype=torch.bool)
        undefined[owner[torch.isnan(utility)]] = True
        out_i, out_j, out_phi = [], [], []
        firsts, counts, skip = plan.first.tolist(), plan.rows.tolist(), undefined.tolist()
        for a, i in enumerate(plan.centers.tolist()):
            if skip[a]:
                continue  # undefined AUROC on i's validation split: no observation this round
            u = utility[firsts[a] : firsts[a] + counts[a]]
            players, perms = plan.players[a], plan.permutations[a]
            if perms is None:
                phi = exact_shapley_batched(u.unsqueeze(0)).squeeze(0)
            else:
                phi = tmc_shapley(
                    dict(zip(plan.masks[a], u.tolist(), strict=True)), perms, self.truncation_tol
                )
            out_i += [i] * len(players)
            out_j += players
            out_phi.append(phi.to(torch.float64))
        if not out_phi:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty, torch.zeros(0, dtype=torch.float64)
        return torch.tensor(out_i), torch.tensor(out_j), torch.cat(out_phi)
