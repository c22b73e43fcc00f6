r"""Beta posterior over each peer's Shapley utility (ABPS Sec. 4.2, Eqs. 5-6).

Center ``i`` keeps a belief ``Beta(alpha_{i->j}, beta_{i->j})`` about the utility of every peer
``j``. After a round with ``j`` in its active set, the Shapley contribution ``phi_{j->i}`` is mapped
to ``[0, 1]`` by the affine clip of Eq. 5 and treated as a soft Bernoulli observation (Eq. 6):
``alpha += phi_bar``, ``beta += 1 - phi_bar``, ``n += 1``. The posterior mean
``mu_{i->j} = alpha / (alpha + beta)`` feeds the UCB of Eq. 7.

Storage (issue 17). Every pair that has never been observed holds the prior
``(alpha0, beta0, 0)``, and a center observes at most ``kappa`` peers a round, so after ``R`` rounds
at most ``R kappa C`` of the ``C^2`` pairs differ from the prior (and only pairs the filter allows
can be observed at all). :class:`PairValues` keeps the observed pairs only, sorted by ``i C + j``,
with one float64 value array per field; the arithmetic of an update is the dense one (each value is
``prior + phi_1 + phi_2 + ...`` in observation order, accumulated by ``index_put_``), so the
posterior is bit-identical to the former dense ``[C, C]`` matrices, which :attr:`BetaPosterior.alpha`
and friends still return on demand. At 3,680 centers the dense state was ``3 x 3680^2 x 8 B =
325 MB``; the sparse one after 50 rounds of ``kappa = 3`` is at most ``50 x 11,040`` pairs of
32 B, 18 MB.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["BetaPosterior", "PairValues", "clip_utility"]

#: Rows of a ``[B, C]`` block that dense views and diagnostics materialize at once.
BLOCK_ROWS = 256


def clip_utility(phi: Tensor | float, phi_min: float = -0.1, phi_max: float = 0.1) -> Tensor:
    """Eq. 5: ``phi_bar = clip_[0,1]((phi - phi_min) / (phi_max - phi_min))``.

    With the paper's ``(phi_min, phi_max) = (-0.1, 0.1)``: ``phi = 0`` maps to 0.5 (exactly
    ``tau_acc``), ``phi <= -0.1`` to 0 and ``phi >= 0.1`` to 1.

    Args:
        phi: Shapley contributions (any shape).
        phi_min: Contribution mapped to 0.
        phi_max: Contribution mapped to 1.

    Returns:
        ``phi_bar`` in ``[0, 1]`` (float64 unless ``phi`` is already a floating tensor).

    Raises:
        ValueError: If ``phi_min >= phi_max``.
    """
    if not phi_min < phi_max:
        raise ValueError(f"phi_min must be < phi_max, got {phi_min} >= {phi_max}")
    phi = torch.as_tensor(phi)
    if not phi.is_floating_point():
        phi = phi.to(torch.float64)
    return ((phi - phi_min) / (phi_max - phi_min)).clamp(0.0, 1.0)


def row_positions(row_ptr: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """Entry positions of the given rows of a CSR layout, and the block row each belongs to.

    Args:
        row_ptr: ``[C + 1]`` start offsets of each row's entries (int64).
        rows: Row ids ``[B]``.

    Returns:
        ``(positions, block_row)``, both int64 ``[n]``: the entries of ``rows[0]``, then of
        ``rows[1]``, ..., each row's in stored order; ``block_row[e]`` is the index into ``rows``.
    """
    starts, ends = row_ptr[rows], row_ptr[rows + 1]
    lengths = ends - starts
    block_row = torch.repeat_interleave(torch.arange(len(rows)), lengths)
    offsets = torch.cumsum(lengths, 0) - lengths  # where each row's run begins in the output
    positions = torch.arange(int(lengths.sum())) - offsets[block_row] + starts[block_row]
    return positions, block_row


class PairValues:
    """Float64 fields on a sparse set of ordered pairs ``(i, j)`` of ``C`` centers.

    Pairs are kept sorted by ``key = i C + j`` (row-major order, the order of ``dense[mask]``), each
    field as one value array aligned with the keys; an absent pair holds the field's default.

    Args:
        num_centers: ``C``.
        defaults: ``{field: value of an absent pair}``.
    """

    def __init__(self, num_centers: int, defaults: dict[str, float]) -> None:
        self.num_centers = int(num_centers)
        self.defaults = {k: float(v) for k, v in defaults.items()}
        self.keys = torch.zeros(0, dtype=torch.int64)
        self.values = {k: torch.zeros(0, dtype=torch.float64) for k in self.defaults}
        self._row_ptr: Tensor | None = None

    def __len__(self) -> int:
        return int(self.keys.numel())

    @property
    def i(self) -> Tensor:
        """Row (observing center) of every stored pair ``[n]``."""
        return torch.div(self.keys, self.num_centers, rounding_mode="floor")

    @property
    def j(self) -> Tensor:
        """Column (observed peer) of every stored pair ``[n]``."""
        return self.keys % self.num_centers

    @property
    def row_ptr(self) -> Tensor:
        """CSR offsets ``[C + 1]``: row ``i``'s pairs are ``keys[row_ptr[i]:row_ptr[i + 1]]``."""
        if self._row_ptr is None:
            bounds = torch.arange(self.num_centers + 1, dtype=torch.int64) * self.num_centers
            self._row_ptr = torch.searchsorted(self.keys, bounds)
        return self._row_ptr

    def positions(self, keys: Tensor) -> Tensor:
        """Positions of ``keys`` in the store, inserting the missing ones with the defaults."""
        keys = keys.reshape(-1).to(torch.int64)
        pos = torch.searchsorted(self.keys, keys)
        inside = pos < len(self)
        found = torch.zeros_like(inside)
        found[inside] = self.keys[pos[inside]] == keys[inside]
        if not bool(found.all()):
            new = torch.unique(keys[~found])
            merged, order = torch.sort(torch.cat([self.keys, new]), stable=True)
            for name, default in self.defaults.items():
                fill = torch.full((len(new),), default, dtype=torch.float64)
                self.values[name] = torch.cat([self.values[name], fill])[order]
            self.keys = merged
            self._row_ptr = None
            pos = torch.searchsorted(self.keys, keys)
        return pos

    def accumulate(self, i: Tensor, j: Tensor, increments: dict[str, Tensor]) -> None:
        """``field[i[e], j[e]] += increments[field][e]`` for every ``e``, in order (``index_put_``).

        Repeated pairs accumulate one after the other, as ``index_put_(accumulate=True)`` on the
        dense matrix does, so the result is the dense one bit for bit.
        """
        pos = (self.positions(i.reshape(-1) * self.num_centers + j.reshape(-1)),)
        for name, inc in increments.items():
            self.values[name].index_put_(pos, inc.reshape(-1).to(torch.float64), accumulate=True)

    def dense(self, name: str) -> Tensor:
        """Field ``name`` as a float64 ``[C, C]`` matrix (the defaults where no pair is stored)."""
        c = self.num_centers
        out = torch.full((c, c), self.defaults[name], dtype=torch.float64)
        out.view(-1)[self.keys] = self.values[name]
        return out

    def within_pair_sd(self) -> float | None:
        """The pooled within-pair standard deviation of the stored values, from the fields ``sum``,
        ``sumsq`` and ``count``: ``sqrt(sum_pairs (sumsq - sum^2 / count) / (sum count - #pairs))``,
        the noise of one observation around its pair's mean; None when fewer than 2 degrees of freedom
        (shared by ScaledUCB's bonus scale and the exceedance rest rule)."""
        count = self.values["count"]
        seen = count > 0
        dof = float(count.sum()) - int(seen.sum())
        if dof < 1:
            return None
        total_sq = float(self.dense("sumsq").sum())
        ss = total_sq - float((self.values["sum"][seen] ** 2 / count[seen]).sum())
        return math.sqrt(max(ss, 0.0) / dof)

    def rows(self, name: str, index: Tensor) -> Tensor:
        """Field ``name`` on rows ``index`` only, float64 ``[len(index), C]``."""
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        out = torch.full((len(index), self.num_centers), self.defaults[name], dtype=torch.float64)
        pos, block_row = row_positions(self.row_ptr, index)
        out[block_row, self.keys[pos] % self.num_centers] = self.values[name][pos]
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"num_centers", "keys", <field>: values, ...}`` (clones)."""
        return {
            "num_centers": self.num_centers,
            "keys": self.keys.clone(),
            **{k: v.clone() for k, v in self.values.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: If the state is for another number of centers, or its keys or fields are
                malformed.
        """
        if int(state.get("num_centers", self.num_centers)) != self.num_centers:
            raise ValueError(f"pair state is for {state['num_centers']} centers, not {self.num_centers}")
        keys = state["keys"].to("cpu", torch.int64).reshape(-1)
        c2 = self.num_centers * self.num_centers
        if keys.numel() and (
            int(keys.min()) < 0 or int(keys.max()) >= c2 or not bool((keys[1:] > keys[:-1]).all())
        ):
            raise ValueError(f"pair keys must be strictly increasing in [0, {c2})")
        values = {k: state[k].to("cpu", torch.float64).reshape(-1).clone() for k in self.defaults}
        if any(v.numel() != keys.numel() for v in values.values()):
            raise ValueError("every pair field needs one value per key")
        self.keys, self.values, self._row_ptr = keys.clone(), values, None

    @classmethod
    def from_dense(cls, dense: dict[str, Tensor], defaults: dict[str, float]) -> PairValues:
        """The pairs where any of the ``[C, C]`` matrices differs from its default (lossless)."""
        first = next(iter(dense.values()))
        store = cls(first.shape[0], defaults)
        differs = torch.zeros(first.shape, dtype=torch.bool)
        for name, matrix in dense.items():
            differs |= matrix.to("cpu", torch.float64) != defaults[name]
        keys = torch.nonzero(differs.reshape(-1)).reshape(-1)
        store.keys = keys
        store.values = {n: m.to("cpu", torch.float64).reshape(-1)[keys].clone() for n, m in dense.items()}
        return store


class BetaPosterior:
    """Beta beliefs of every center about every peer, stored for the observed pairs only.

    Row ``i`` holds center ``i``'s beliefs about peers ``j``: ``alpha[i, j]``, ``beta[i, j]`` and the
    number of observations ``count[i, j]`` (``n_{i->j}`` of Eq. 7). The diagonal is never updated. A
    pair never observed holds the prior ``(alpha0, beta0, 0)``; the observed ones live in
    :attr:`pairs` (see the module docstring). :attr:`alpha`, :attr:`beta`, :attr:`count` and
    :meth:`mean` materialize dense float64 ``[C, C]`` copies (for inspection and callbacks; the
    selector itself reads :attr:`pairs` and :meth:`mean_rows`).

    Args:
        num_centers: ``C``.
        alpha0: Prior pseudo-successes (Algorithm 1 line 7), ``> 0``.
        beta0: Prior pseudo-failures, ``> 0``.

    Raises:
        ValueError: If ``num_centers < 1`` or a prior parameter is not positive.
    """

    def __init__(self, num_centers: int, alpha0: float = 1.0, beta0: float = 1.0) -> None:
        if num_centers < 1:
            raise ValueError(f"num_centers must be >= 1, got {num_centers}")
        if not (alpha0 > 0 and beta0 > 0):
            raise ValueError(f"Beta prior needs alpha0 > 0 and beta0 > 0, got ({alpha0}, {beta0})")
        self.num_centers = num_centers
        self.alpha0, self.beta0 = float(alpha0), float(beta0)
        self.pairs = PairValues(num_centers, self._defaults())

    def _defaults(self) -> dict[str, float]:
        return {"alpha": self.alpha0, "beta": self.beta0, "count": 0.0}

    @property
    def alpha(self) -> Tensor:
        """Dense ``alpha`` ``[C, C]`` (a fresh copy)."""
        return self.pairs.dense("alpha")

    @property
    def beta(self) -> Tensor:
        """Dense ``beta`` ``[C, C]`` (a fresh copy)."""
        return self.pairs.dense("beta")

    @property
    def count(self) -> Tensor:
        """Dense ``count`` ``[C, C]`` (a fresh copy)."""
        return self.pairs.dense("count")

    def update(self, i: Tensor, j: Tensor, phi_bar: Tensor) -> None:
        """Eq. 6 for a batch of observations: center ``i[e]`` observed ``phi_bar[e]`` from ``j[e]``.

        Repeated ``(i, j)`` pairs within one call accumulate (each is one observation).

        Args:
            i: Observing centers ``[E]``.
            j: Observed peers ``[E]``.
            phi_bar: Clipped contributions ``[E]`` in ``[0, 1]`` (see :func:`clip_utility`).

        Raises:
            ValueError: On mismatched lengths, ids out of range, ``i == j``, or ``phi_bar``
                outside ``[0, 1]``.
        """
        i = torch.as_tensor(i).reshape(-1).to("cpu", torch.int64)
        j = torch.as_tensor(j).reshape(-1).to("cpu", torch.int64)
        phi_bar = torch.as_tensor(phi_bar).reshape(-1).to("cpu", torch.float64)
        if not (i.shape == j.shape == phi_bar.shape):
            raise ValueError(f"update needs equal lengths, got {i.numel()}, {j.numel()}, {phi_bar.numel()}")
        if i.numel() == 0:
            return
        c = self.num_centers
        if int(torch.minimum(i, j).min()) < 0 or int(torch.maximum(i, j).max()) >= c:
            raise ValueError(f"center ids must be in [0, {c})")
        if bool((i == j).any()):
            raise ValueError("a center does not observe itself (i == j)")
        if not bool(((phi_bar >= 0) & (phi_bar <= 1)).all()):
            raise ValueError("phi_bar must lie in [0, 1] (apply clip_utility first)")
        self.pairs.accumulate(
            i, j, {"alpha": phi_bar, "beta": 1.0 - phi_bar, "count": torch.ones_like(phi_bar)}
        )

    def mean(self) -> Tensor:
        """Posterior means ``mu_{i->j} = alpha / (alpha + beta)``, dense ``[C, C]``."""
        alpha, beta = self.alpha, self.beta
        return alpha / (alpha + beta)

    def prior_mean(self) -> Tensor:
        """The mean of an unobserved pair, ``alpha0 / (alpha0 + beta0)``, as a float64 ``[1]``."""
        alpha = torch.tensor([self.alpha0], dtype=torch.float64)
        return alpha / (alpha + torch.tensor([self.beta0], dtype=torch.float64))

    def observed_mean(self) -> Tensor:
        """Means of the stored pairs ``[n]``, in :attr:`pairs` order."""
        alpha, beta = self.pairs.values["alpha"], self.pairs.values["beta"]
        return alpha / (alpha + beta)

    def mean_rows(self, index: Tensor) -> Tensor:
        """Posterior means of rows ``index`` only, float64 ``[len(index), C]`` (rows of :meth:`mean`)."""
        alpha, beta = self.pairs.rows("alpha", index), self.pairs.rows("beta", index)
        return alpha / (alpha + beta)

    def state_dict(self) -> dict[str, Any]:
        """The sparse state: ``{"pairs": {keys, alpha, beta, count}, "alpha0", "beta0"}``."""
        return {"pairs": self.pairs.state_dict(), "alpha0": self.alpha0, "beta0": self.beta0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, or a dense ``{alpha, beta, count}`` state from before issue 17."""
        self.alpha0 = float(state.get("alpha0", self.alpha0))
        self.beta0 = float(state.get("beta0", self.beta0))
        if "pairs" in state:
            pairs = PairValues(self.num_centers, self._defaults())
            pairs.load_state_dict(state["pairs"])
        else:
            shape = (self.num_centers, self.num_centers)
            for key in ("alpha", "beta", "count"):
                if tuple(state[key].shape) != shape:
                    raise ValueError(f"posterior {key} must be {list(shape)}, got {list(state[key].shape)}")
            pairs = PairValues.from_dense({k: state[k] for k in ("alpha", "beta", "count")}, self._defaults())
        self.pairs = pairs


#: Per-pair credit moments (sum, sum of squares, count of the observed phi_bar) behind
#: :meth:`PairValues.within_pair_sd`, kept by ScaledUCB and the exceedance rest rule.
MOMENTS: dict[str, float] = {"sum": 0.0, "sumsq": 0.0, "count": 0.0}


def add_moments(
    stats: PairValues | None, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int
) -> PairValues:
    """``stats`` (a new :data:`MOMENTS` store when None) plus ``phi_bar[k]`` at pair ``(i[k], j[k])``."""
    if stats is None:
        stats = PairValues(num_centers, MOMENTS)
    x = torch.as_tensor(phi_bar, dtype=torch.float64).reshape(-1)
    i, j = torch.as_tensor(i).reshape(-1), torch.as_tensor(j).reshape(-1)
    stats.accumulate(i, j, {"sum": x, "sumsq": x * x, "count": torch.ones_like(x)})
    return stats
