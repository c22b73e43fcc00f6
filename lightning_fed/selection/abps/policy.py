r"""Selection policies: how a center scores its peers from the Beta posterior (ABPS Sec. 4.3).

A :class:`SelectionPolicy` turns the posterior of :class:`~lightning_fed.selection.abps.posterior.
BetaPosterior` into one score table per round, ``score[i, j]`` = center ``i``'s score of peer
``j`` (:meth:`SelectionPolicy.pair_scores`, a :class:`PairScores` read by blocks of rows or
columns; :meth:`SelectionPolicy.scores` is the same table as a dense ``[C, C]`` matrix). The same
scores rank a center's proposals and decide acceptance (``j`` accepts ``i`` when
``score[j, i] >= tau_acc``), so every policy reuses the posterior, the propose-reject matching
and the rest of :func:`~lightning_fed.selection.abps.matching.propose_reject` unchanged. Choose one
with ``algorithm.init_args.selector.init_args.policy.class_path``:

* :class:`UCB`, the paper's Eq. 7 (default):
  :math:`\mu_{i\to j} + \gamma \sqrt{2 \ln t / (n_{i\to j} + 1)}`.
* :class:`ScaledUCB`: Eq. 7 with the exploration term scaled to the observed spread of the clipped
  utilities (derivation in its docstring).
* :class:`Thompson`: one draw from every peer's Beta posterior per round.

Why a scaled bonus exists (measured, issue 14). Eq. 7's bonus is sized for rewards that fill
``[0, 1]``; Eq. 5 maps Shapley values within ``+-0.1`` to ``[0, 1]``, but real contributions are far
smaller, so the posterior means of tried peers stay within a few hundredths of 0.5 while an untried
peer's bonus at ``t = 10`` is ``sqrt 2 * sqrt(2 ln 10) = 3.0``. Every untried peer outranks every
tried one and the matching becomes a random rotating mesh (see
``tests/selection/test_policy_oracle.py`` for the measured behaviour on a utility oracle).

Score tables (issue 17). The matching reads the scores a block of centers at a time, so no
``[C, C]`` float64 matrix (108 MB at 3,680 centers, several of them as temporaries of Eq. 7) is
built for the UCB policies: every pair never observed has the prior's score, so :class:`UCB` and
:class:`ScaledUCB` return a :class:`SparseScores`, Eq. 7 evaluated on the observed pairs plus one
prior score for all others. Eq. 7 is elementwise, so each score is the dense matrix's entry bit for
bit. :class:`Thompson` draws one Beta sample per pair in row-major order, which needs every pair's
draw: it returns a :class:`DenseScores` (one ``[C, C]`` float64 matrix, filled a block of rows at a
time from the same random stream).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from lightning_fed.selection.abps.posterior import (
    BLOCK_ROWS,
    MOMENTS,
    BetaPosterior,
    PairValues,
    add_moments,
    row_positions,
)
from lightning_fed.selection.abps.ucb import ucb
from lightning_fed.selection.base import SELECTOR_KEY
from lightning_fed.validation import check_number

__all__ = ["UCB", "DenseScores", "PairScores", "ScaledUCB", "SelectionPolicy", "SparseScores", "Thompson"]


class PairScores(ABC):
    """One round's scores ``score[i, j]`` (center ``i``'s score of peer ``j``), read by blocks.

    Attributes:
        num_centers: ``C``.
    """

    num_centers: int

    @abstractmethod
    def rows(self, index: Tensor) -> Tensor:
        """``score[index, :]``, float64 ``[len(index), C]``."""

    @abstractmethod
    def cols(self, index: Tensor) -> Tensor:
        """``score[:, index]``, float64 ``[C, len(index)]``."""

    @abstractmethod
    def has_nan(self) -> bool:
        """Whether any score is NaN."""

    def dense(self) -> Tensor:
        """The whole table, float64 ``[C, C]``."""
        return self.rows(torch.arange(self.num_centers))


class DenseScores(PairScores):
    """A score table held as one ``[C, C]`` matrix (cast to float64 on the CPU).

    Args:
        matrix: ``[C, C]`` scores.

    Raises:
        ValueError: If ``matrix`` is not square.
    """

    def __init__(self, matrix: Tensor) -> None:
        if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"scores must be [C, C], got {list(matrix.shape)}")
        self.matrix = matrix.detach().to("cpu", torch.float64)
        self.num_centers = int(matrix.shape[0])

    def rows(self, index: Tensor) -> Tensor:
        return self.matrix.index_select(0, torch.as_tensor(index, dtype=torch.int64).reshape(-1))

    def cols(self, index: Tensor) -> Tensor:
        return self.matrix.index_select(1, torch.as_tensor(index, dtype=torch.int64).reshape(-1))

    def has_nan(self) -> bool:
        return bool(torch.isnan(self.matrix).any())

    def dense(self) -> Tensor:
        return self.matrix


class SparseScores(PairScores):
    """Every pair scores ``base`` except the listed ones (sorted keys ``i C + j``).

    Args:
        num_centers: ``C``.
        base: The score of an unlisted pair (float64 ``[1]`` or a float).
        keys: Listed pairs, strictly increasing ``i C + j`` (int64 ``[n]``).
        values: Their scores, float64 ``[n]``.
        row_base: Optional per-row score of unlisted pairs (float64 ``[C]``: row ``i``'s unlisted
            pairs score ``row_base[i]``), replacing ``base``.
    """

    def __init__(
        self,
        num_centers: int,
        base: Tensor | float,
        keys: Tensor,
        values: Tensor,
        row_base: Tensor | None = None,
    ) -> None:
        self.num_centers = int(num_centers)
        self.base = float(torch.as_tensor(base, dtype=torch.float64).reshape(-1)[0])
        self.row_base = None if row_base is None else row_base.reshape(-1).to(torch.float64)
        self.keys = keys.reshape(-1).to(torch.int64)
        self.values = values.reshape(-1).to(torch.float64)
        c = self.num_centers
        bounds = torch.arange(c + 1, dtype=torch.int64) * c
        self._row_ptr = torch.searchsorted(self.keys, bounds)
        self._col: tuple[Tensor, Tensor, Tensor] | None = None

    def _by_column(self) -> tuple[Tensor, Tensor, Tensor]:
        """Transposed layout: ``(col_ptr, row of each entry, value)``, entries sorted by ``j C + i``."""
        if self._col is None:
            c = self.num_centers
            i = torch.div(self.keys, c, rounding_mode="floor")
            j = self.keys % c
            order = torch.argsort(j * c + i)
            col_ptr = torch.searchsorted((j * c + i)[order], torch.arange(c + 1, dtype=torch.int64) * c)
            self._col = (col_ptr, i[order], self.values[order])
        return self._col

    def rows(self, index: Tensor) -> Tensor:
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        out = torch.full((len(index), self.num_centers), self.base, dtype=torch.float64)
        if self.row_base is not None:
            out[:] = self.row_base[index].unsqueeze(1)
        pos, block_row = row_positions(self._row_ptr, index)
        out[block_row, self.keys[pos] % self.num_centers] = self.values[pos]
        return out

    def cols(self, index: Tensor) -> Tensor:
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        col_ptr, row, value = self._by_column()
        out = torch.full((self.num_centers, len(index)), self.base, dtype=torch.float64)
        if self.row_base is not None:
            out[:] = self.row_base.unsqueeze(1)
        pos, block_col = row_positions(col_ptr, index)
        out[row[pos], block_col] = value[pos]
        return out

    def has_nan(self) -> bool:
        base_nan = math.isnan(self.base) if self.row_base is None else bool(torch.isnan(self.row_base).any())
        return base_nan or bool(torch.isnan(self.values).any())

    def dense(self) -> Tensor:
        c = self.num_centers
        out = torch.full((c, c), self.base, dtype=torch.float64)
        if self.row_base is not None:
            out[:] = self.row_base.unsqueeze(1)
        out.view(-1)[self.keys] = self.values
        return out


def ucb_scores(posterior: BetaPosterior, t: int, gamma: float) -> SparseScores:
    """Eq. 7 as a :class:`SparseScores`: :func:`~lightning_fed.selection.abps.ucb.ucb` on the
    observed pairs, and once on the prior ``(alpha0 / (alpha0 + beta0), n = 0)`` for all others."""
    pairs = posterior.pairs
    values = ucb(posterior.observed_mean(), pairs.values["count"], t, gamma)
    base = ucb(posterior.prior_mean(), torch.zeros(1, dtype=torch.float64), t, gamma)
    return SparseScores(posterior.num_centers, base, pairs.keys, values)


class SelectionPolicy(ABC):
    """Scores of one round from the Beta posterior (ranking and acceptance alike).

    Attributes:
        pools_observations: Whether the scores read other centers' observations (booked by ABPS as
            posted to the directory, :mod:`~lightning_fed.selection.abps.board`); False: each center
            scores from its own.
        feature_record_bytes: Bytes of the public pair features a center registers once (0: none).
    """

    pools_observations: bool = False
    feature_record_bytes: int = 0

    @abstractmethod
    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        """Center ``i``'s score of peer ``j`` at 1-based round ``t``, float64 ``[C, C]``.

        Args:
            posterior: The selector's beliefs.
            t: 1-based round index ``t_k``.
            generator: This round's policy generator (``(seed, "policy", round)``, apart from the
                matching's, so the matching's draws do not depend on the policy).
        """

    def pair_scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> PairScores:
        """The same scores as a :class:`PairScores` (what the selector reads; default: :meth:`scores`
        wrapped in a :class:`DenseScores`). Arguments as :meth:`scores`."""
        return DenseScores(self.scores(posterior, t, generator))

    def setup(self) -> None:  # noqa: B027 (stateless by default)
        """Forget everything learned (called by the selector's ``setup``, before a run)."""

    def bind(self, metadata: Tensor, attributes: list[dict[str, Any]] | None) -> None:  # noqa: B027
        """The centers' public descriptors ``[C, d]`` and declared attributes (one dict per center, or
        None), given by the selector's ``setup`` before :meth:`setup`; unused by default (a policy on
        pair features, :class:`~lightning_fed.selection.abps.regression.PairRegression`, reads them)."""

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:  # noqa: B027
        """This round's clipped observations: center ``i[e]`` saw ``phi_bar[e]`` from ``j[e]`` (no-op
        by default; :class:`ScaledUCB` estimates its noise scale from them)."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


class UCB(SelectionPolicy):
    """The paper's Eq. 7: ``mu_{i->j} + gamma sqrt(2 ln t / (n_{i->j} + 1))``.

    Args:
        gamma: Exploration weight (paper: sqrt 2), ``>= 0``.
    """

    def __init__(self, gamma: float = math.sqrt(2.0)) -> None:
        self.gamma = check_number(f"{SELECTOR_KEY}.policy.init_args.gamma", gamma, 0.0, strict=False)

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        return self.pair_scores(posterior, t, generator).dense()

    def pair_scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> SparseScores:
        return ucb_scores(posterior, t, self.gamma)

    def __repr__(self) -> str:
        return f"UCB(gamma={self.gamma})"


class ScaledUCB(SelectionPolicy):
    r"""Eq. 7 with the exploration term scaled to the noise of the clipped utilities.

    Derivation. UCB1's radius :math:`\sqrt{2 \ln t / n}` is the Hoeffding confidence radius of a mean
    of ``n`` rewards that are sub-Gaussian with scale :math:`\sigma = 1/2` about their mean, the worst
    case for a reward in ``[0, 1]``; for scale :math:`\sigma` the radius is
    :math:`2\sigma \sqrt{2 \ln t / n}`. The rewards here are the Eq. 5 clips :math:`\bar\phi` of
    Shapley values that are far smaller than the clip's ``+-0.1``, so their noise about each peer's
    mean is a small fraction of 1/2 and Eq. 7's radius drowns every difference the posterior means can
    show. So the bonus is

    .. math:: \mu_{i\to j} + \gamma\, s\, \sqrt{2 \ln t / (n_{i\to j} + 1)}, \qquad s = 2 \hat\sigma_w,

    with :math:`\hat\sigma_w` the pooled *within-peer* standard deviation of the observations (the
    one-way ANOVA residual over every observed ``(i, j)``:
    :math:`\hat\sigma_w^2 = \sum_{(i,j)} \sum_k (\bar\phi_{ijk} - \bar\phi_{ij\cdot})^2 / (N - P)`,
    ``N`` observations of ``P`` pairs). It is the noise of one peer's rewards about its own mean,
    which is what the confidence radius is about; pooling it over the federation gives a center with
    a single observation of a peer a usable scale. (The total spread of the observations would also
    count the differences between peers, the signal itself, and keep the bonus large exactly when
    peers differ.) Before any pair has two observations ``s = 1`` (Eq. 7 itself), and ``s`` is
    floored at ``min_scale``. ``scale`` fixes ``s`` instead (``scale = 1`` is :class:`UCB`).

    The per-pair sums are kept for the observed pairs only (:class:`~lightning_fed.selection.abps.
    posterior.PairValues`). :meth:`s` sums the squares over a transient dense ``[C, C]`` copy, the
    order in which the former dense state summed them, so ``s`` is the same float.

    Args:
        gamma: Exploration weight, ``>= 0`` (sqrt 2 as Eq. 7).
        scale: A fixed ``s`` in place of ``2 sigma_w`` (None: estimated).
        min_scale: Floor of the estimated ``s`` (> 0).
    """

    def __init__(
        self, gamma: float = math.sqrt(2.0), scale: float | None = None, min_scale: float = 1e-3
    ) -> None:
        self.gamma = check_number(f"{SELECTOR_KEY}.policy.init_args.gamma", gamma, 0.0, strict=False)
        if scale is not None:
            scale = check_number(f"{SELECTOR_KEY}.policy.init_args.scale", scale, 0.0, strict=True)
        self.scale = scale
        self.min_scale = check_number(
            f"{SELECTOR_KEY}.policy.init_args.min_scale", min_scale, 0.0, strict=True
        )
        self.setup()

    @property
    def pools_observations(self) -> bool:  # type: ignore[override]
        """The estimated ``s`` is pooled over every observer's observations (a fixed ``scale`` is not)."""
        return self.scale is None

    def setup(self) -> None:
        #: Per observed pair: sum of phi_bar, sum of phi_bar^2, observations (None before any).
        self.stats: PairValues | None = None

    def s(self) -> float:
        """The bonus scale: ``scale`` if fixed, else ``max(2 sigma_w, min_scale)`` (1 before data)."""
        if self.scale is not None:
            return self.scale
        sd = None if self.stats is None else self.stats.within_pair_sd()
        return 1.0 if sd is None else max(2.0 * sd, self.min_scale)

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        return self.pair_scores(posterior, t, generator).dense()

    def pair_scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> SparseScores:
        return ucb_scores(posterior, t, self.gamma * self.s())

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:
        """Accumulate the per-pair sums behind ``sigma_w``."""
        self.stats = add_moments(self.stats, i, j, phi_bar, num_centers)

    def state_dict(self) -> dict[str, Any]:
        """``{"pairs": ...}`` (the sparse sums; ``{}`` before any observation)."""
        if self.stats is None:
            return {}
        return {"pairs": self.stats.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, or the dense ``{sum, sumsq, count}`` state from before issue 17."""
        if "pairs" in state:
            self.stats = PairValues(int(state["pairs"]["num_centers"]), MOMENTS)
            self.stats.load_state_dict(state["pairs"])
        elif "count" in state:
            self.stats = PairValues.from_dense({k: state[k] for k in MOMENTS}, MOMENTS)

    def __repr__(self) -> str:
        return f"ScaledUCB(gamma={self.gamma}, scale={self.scale}, min_scale={self.min_scale})"


class Thompson(SelectionPolicy):
    r"""Thompson sampling: ``score[i, j] ~ Beta(alpha_{i->j}, beta_{i->j})``, one draw per round.

    A center proposes in the order of its samples, and ``j`` accepts ``i`` when its own sample of
    ``i`` is ``>= tau_acc``. The draws come from the round's policy generator (apart from the
    matching's), so a seed reproduces them. A Beta sample is ``G_a / (G_a + G_b)`` with
    ``G ~ Gamma(., 1)``, drawn with ``torch._standard_gamma`` under ``torch.random.fork_rng`` seeded
    from the generator (``torch.distributions`` takes no generator): first ``G_a`` for every pair in
    row-major order, then ``G_b``. The draws are made a block of rows at a time; the gamma sampler
    reads the global generator one element after the other, so the blocks continue one stream and
    give the draws of one ``[C, C]`` call.

    The posterior's width is set by the pseudo-count (``sd ~ 1/(2 sqrt(n + 3))`` near 0.5), not by the
    utilities' spread, so Thompson separates peers only once ``n`` is large against
    ``(0.5 / delta)^2`` for a clipped utility difference ``delta``: it learns fast when contributions
    reach the clip edges and slowly when they are small.
    """

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        c = posterior.num_centers
        out = torch.empty(c, c, dtype=torch.float64)
        blocks = [(lo, min(c, lo + BLOCK_ROWS)) for lo in range(0, c, BLOCK_ROWS)]
        tiny = torch.finfo(torch.float64).tiny
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for lo, hi in blocks:  # G_a of every pair, row-major
                out[lo:hi] = torch._standard_gamma(posterior.pairs.rows("alpha", torch.arange(lo, hi)))
            for lo, hi in blocks:  # then G_b
                ga = out[lo:hi]
                total = ga + torch._standard_gamma(posterior.pairs.rows("beta", torch.arange(lo, hi)))
                out[lo:hi] = torch.where(total > 0, ga / total.clamp(min=tiny), 0.5)
        return out

    def __repr__(self) -> str:
        return "Thompson()"
