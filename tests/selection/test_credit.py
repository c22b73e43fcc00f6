"""Shapley credit of a round (ABPS Eq. 4) against the implementation before issue 17.

The coefficients are now built vectorized over centers and the coalition models are built and
evaluated in chunks of bounded size; the reference below is the former all-at-once implementation,
verbatim, and the values must agree bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps import ShapleyCredit, propose_reject
from lightning_fed.selection.abps.shapley import (
    coalitions_exact,
    exact_shapley_batched,
    tmc_masks,
    tmc_permutations,
    tmc_shapley,
)
from lightning_fed.selection.base import partner_edges
from lightning_fed.types import RoundContext


def _reference_credit(credit: ShapleyCredit, ctx, partners, own, received, edges, n_train, personal):
    """ShapleyCredit.__call__ and _values before issue 17, verbatim."""
    src, dst = edges
    c = n_train.shape[0]
    edge_of = {(d, s): e for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
    gen = torch_generator(ctx.seed, "shapley", ctx.round)
    n = n_train.to(torch.float64).tolist()
    rows, cols, vals, centers, plans = [], [], [], [], []
    for i, players in enumerate(partners):
        m = len(players)
        if m == 0:
            continue
        perms = None if m <= credit.exact_max else tmc_permutations(m, credit.num_permutations, gen)
        masks = coalitions_exact(m) if perms is None else tmc_masks(perms)
        plans.append((i, players, masks, perms, len(centers)))
        for mask in masks:
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
    out_i, out_j, out_phi = [], [], []
    for i, players, masks, perms, first in plans:
        u = utility[first : first + len(masks)]
        if torch.isnan(u).any():
            continue
        if perms is None:
            phi = exact_shapley_batched(u.unsqueeze(0)).squeeze(0)
        else:
            phi = tmc_shapley(dict(zip(masks, u.tolist(), strict=True)), perms, credit.truncation_tol)
        out_i += [i] * len(players)
        out_j += players
        out_phi.append(phi.to(torch.float64))
    if not out_phi:
        empty = torch.zeros(0, dtype=torch.int64)
        return empty, empty, torch.zeros(0, dtype=torch.float64)
    return torch.tensor(out_i), torch.tensor(out_j), torch.cat(out_phi)


class _Utility:
    """A utility that depends on every bit of every parameter (a float64 projection), NaN for the
    centers in ``undefined``, recording how many models each call evaluated. Like the federation's
    ``val_utility`` it scores each model on its own (a matrix-vector product would not: its rounding
    may depend on how many rows share the call)."""

    def __init__(self, shapes: dict, undefined: set[int]) -> None:
        g = torch.Generator().manual_seed(99)
        self.weights = {
            n: torch.randn(int(torch.tensor(s).prod()), generator=g, dtype=torch.float64)
            for n, s in shapes.items()
        }
        self.undefined = undefined
        self.calls: list[int] = []

    def __call__(self, params: dict, centers: torch.Tensor) -> torch.Tensor:
        self.calls.append(len(centers))
        out = torch.zeros(len(centers), dtype=torch.float64)
        for name, p in params.items():  # a row-wise reduction: each model's value is its own
            out += (p.reshape(len(centers), -1).to(torch.float64) * self.weights[name]).sum(1)
        bad = torch.tensor([int(c) in self.undefined for c in centers.tolist()], dtype=torch.bool)
        return torch.where(bad, float("nan"), out)


def _round(c: int, kappa: int, seed: int):
    """Partners from a propose-reject matching, stacked parameters (odd sizes, a personal head) and
    the received messages (the senders' rows, slightly perturbed as a lossy wire would)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(c, c, generator=g, dtype=torch.float64)
    partners = propose_reject(scores, ~torch.eye(c, dtype=torch.bool), kappa, 0.3, 0.1, g)
    src, dst = partner_edges(partners)
    shapes = {"w": (5, 3), "b": (7,), "one": (1,)}
    own = {n: torch.randn(c, *s, generator=g) for n, s in shapes.items()}
    received = {
        n: p[src] * (1 + 1e-3 * torch.randn(len(src), *p.shape[1:], generator=g)) for n, p in own.items()
    }
    personal = {"head": torch.randn(c, 2, 3, generator=g)}
    n_train = torch.randint(5, 400, (c,), generator=g)
    return partners, own, received, (src, dst), n_train, personal, {**shapes, "head": (2, 3)}


@pytest.mark.parametrize(
    ("c", "kappa", "exact_max", "chunk_bytes"),
    [(12, 3, 5, None), (70, 3, 5, 2000), (70, 3, 5, 1), (40, 6, 3, 3000), (40, 6, 3, None), (9, 1, 5, 200)],
)
def test_chunked_vectorized_credit_equals_the_reference(c, kappa, exact_max, chunk_bytes) -> None:
    """Exact and TMC centers (``m > exact_max``), NaN utilities, a personal head, chunks from one
    model to all of them: the same ``(i, j, phi)`` as the former implementation, bit for bit."""
    partners, own, received, edges, n_train, personal, shapes = _round(c, kappa, seed=c + kappa)
    credit = ShapleyCredit(exact_max=exact_max, num_permutations=5)
    if chunk_bytes is not None:
        credit.chunk_bytes = chunk_bytes
    undefined = {3, 5}
    ref_u, new_u = _Utility(shapes, undefined), _Utility(shapes, undefined)
    want = _reference_credit(
        credit,
        RoundContext(round=2, seed=7, val_utility=ref_u),
        partners,
        own,
        received,
        edges,
        n_train,
        personal,
    )
    got = credit(
        RoundContext(round=2, seed=7, val_utility=new_u), partners, own, received, edges, n_train, personal
    )
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert sum(new_u.calls) == sum(ref_u.calls)
    per_model = sum(p[0].numel() * p.element_size() for p in (*own.values(), *personal.values()))
    assert max(new_u.calls) <= max(1, credit.chunk_bytes // per_model)
    assert not set(got[0].tolist()) & undefined and len(got[0]) > 0


def test_no_partner_means_no_credit_and_no_evaluation() -> None:
    credit = ShapleyCredit()
    utility = _Utility({"w": (2,)}, set())
    ctx = RoundContext(round=0, seed=0, val_utility=utility)
    empty = torch.zeros(0, dtype=torch.int64)
    i, j, phi = credit(
        ctx, [[], []], {"w": torch.zeros(2, 2)}, {"w": torch.zeros(0, 2)}, (empty, empty), torch.ones(2), {}
    )
    assert i.numel() == j.numel() == phi.numel() == 0 and utility.calls == []


def test_a_partner_without_an_edge_is_an_error() -> None:
    credit = ShapleyCredit()
    ctx = RoundContext(round=0, seed=0, val_utility=_Utility({"w": (2,)}, set()))
    edges = (torch.tensor([1]), torch.tensor([0]))  # 1 -> 0 only; 0 -> 1 is missing
    with pytest.raises(KeyError):
        credit(ctx, [[1], [0]], {"w": torch.zeros(2, 2)}, {"w": torch.zeros(1, 2)}, edges, torch.ones(2), {})
