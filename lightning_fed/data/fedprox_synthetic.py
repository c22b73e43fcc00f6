r"""Li et al.'s Synthetic(alpha, beta) as an ICU-shaped federation with a binary label.

:class:`FedProxSynthetic` is the synthetic generator of Li et al. (2020), "Federated Optimization in
Heterogeneous Networks" (FedProx), Sec. 5.1 and App. C.1, with ``K = 2`` classes, laid out like
:class:`~lightning_fed.data.synthetic.TeacherICU` (same centers, sizes, site labels, years and
column names) so the rest of the library uses it unchanged.

Generative model (Li et al., App. C.1)
    For each draw group ``g`` (a center, or a care unit with ``level="unit"``) and ``d = 60``:

    .. math::

        u_g &\sim \mathcal N(0, \alpha), \qquad B_g \sim \mathcal N(0, \beta)\\
        W_g &\in \mathbb R^{2 \times d},\ (W_g)_{cj} \sim \mathcal N(u_g, 1), \qquad
            b_g \in \mathbb R^{2},\ (b_g)_c \sim \mathcal N(u_g, 1)\\
        v_g &\in \mathbb R^{d},\ (v_g)_j \sim \mathcal N(B_g, 1)\\
        x &\sim \mathcal N(v_g, \Sigma), \qquad \Sigma = \mathrm{diag}(j^{-1.2})_{j=1..d}\\
        y &= \arg\max_c\ \mathrm{softmax}(W_g x + b_g)_c,
            \quad\text{i.e. } y = 1 \iff (W_g x + b_g)_1 > (W_g x + b_g)_0

    all draws independent. :math:`\mathcal N(\mu, s)` is Li et al.'s notation with ``s`` the
    **variance**: ``u_g = sqrt(alpha) z``, ``B_g = sqrt(beta) z'``. (Li et al.'s released generator,
    ``data/synthetic_*/generate_synthetic.py`` of ``litian96/FedProx``, passes ``alpha`` and
    ``beta`` to ``np.random.normal`` as the standard deviation; the two agree at the paper's
    Synthetic(0, 0) and Synthetic(1, 1); its Synthetic(0.5, 0.5) is ``alpha = beta = 0.25`` here.)
    The variables are standard normals drawn in a fixed order and then scaled, so ``alpha`` and
    ``beta`` change the values of the draws, never which random numbers are used.

Levels
    ``level="center"`` (default, Li et al. exactly): every center is a device with its own
    :math:`u_k, B_k, W_k, b_k, v_k`. ``level="unit"``: the six care units are the devices; the draws
    are made once per unit and shared by that unit's centers, which are then i.i.d. samples of one
    distribution (same concept, same feature law; only their sizes and years differ).

Centers, sizes, years
    As :class:`~lightning_fed.data.synthetic.TeacherICU`
    (:mod:`lightning_fed.data.synthetic_layout`): care unit x 2-year window, sites
    ``"<unit> <start>-<start + 1>"`` (plus ``" #<j>"`` for the sub-centers of a window beyond 246
    centers), heavy-tailed Lomax sizes summing to ``num_stays``, year =
    window start + 0 or 1. Attributes per site: ``care_unit``, ``window_start`` and ``base_rate``,
    the center's expected positive rate in closed form: with
    :math:`\delta = (W_g)_1 - (W_g)_0` and :math:`c = (b_g)_1 - (b_g)_0`,
    :math:`\delta^\top x + c \sim \mathcal N(\delta^\top v_g + c,\ \delta^\top \Sigma \delta)`, so

    .. math:: r_k = P(y = 1) = \Phi\left(\frac{\delta^\top v_g + c}{\sqrt{\delta^\top \Sigma \delta}}\right).

Columns and descriptor
    The 60 columns carry :data:`~lightning_fed.data.synthetic.FEATURE_NAMES` (column ``j`` of
    ``x`` is the ``j``-th name, so ``age`` has variance 1 and ``temperature_max`` ``60^{-1.2}``); the
    names are labels only, every column is a continuous Gaussian and is standardized per center by
    :meth:`build`. The table keeps the 12 Charlson names as its ``charlson_columns``, so the
    metadata descriptor keeps its 15 entries (``metadata_dim: 15`` configs work): the base three,
    then what :func:`~lightning_fed.data.center.build_federation` computes as "prevalences", the
    train means of those 12 raw columns (columns ``j = 28..39``), i.e. estimates of the center's
    feature means :math:`(v_g)_j \sim \mathcal N(B_g, 1)` with standard error
    :math:`\sqrt{j^{-1.2} / n_{train}} \le 0.14 / \sqrt{n_{train}}`. They describe the center's
    feature law (identical across a unit's centers under ``level="unit"``), not comorbidities.

Orderings
    Predicted from the model. (i) ``alpha`` does not reach the data: :math:`u_g` is added to every
    entry of :math:`W_g` and :math:`b_g`, so it shifts every logit by the same
    :math:`u_g (\mathbf 1^\top x + 1)`, which the argmax ignores (in Li et al.'s 10 classes too).
    With ``K = 2`` the label is :math:`y = [\delta^\top x + c > 0]` with
    :math:`\delta \sim \mathcal N(0, 2 I)` and :math:`c \sim \mathcal N(0, 2)`, free of :math:`u_g`;
    here, with the same seed, every ``alpha`` gives the same ``x`` and (up to the float rounding of
    a row on the decision boundary) the same ``y``. So federation cannot help "through the shared
    prior mean": :math:`u_g` is neither shared between devices nor visible in the data. (ii) Labels
    are nearly one-class in most centers: :math:`\delta^\top v_g + c` has standard deviation
    :math:`\sqrt{2(d(1 + \beta) + 1)} \approx 15.6` against
    :math:`\sqrt{\delta^\top \Sigma \delta} \approx \sqrt{2 \cdot 3.39} \approx 2.6`, so
    :math:`r_k = \Phi(Z)` with :math:`Z` of standard deviation about 6.5 (Monte Carlo) and only
    about 23 % of the draw groups have :math:`0.05 < r_k < 0.95`; elsewhere the test split is
    mostly single-class (AUROC undefined). With ``level="unit"`` that is six draws for the whole
    federation, so how many centers can be scored varies a lot with the seed.
    (iii) ``level="center"``: the rules :math:`\delta_k` of two centers are independent with mean
    zero (:math:`E[\delta_k^\top \delta_l] = 0`), so another center's rows say nothing about this
    center's rule. One model for all centers on the per-center standardized features (what FedAvg
    sees) learns about the average rule of the centers holding both classes (a one-class center's
    rows have mean zero after standardization and mostly move the intercept), whose cosine with
    any one center's rule is about :math:`1/\sqrt m` for ``m`` such centers: near chance. The
    pooled standardization of Centralized keeps the raw means :math:`v_k`, which are far apart
    (:math:`\|v_k - v_l\| \approx \sqrt{2 d (1 + \beta)} \approx 15` against a within-center spread
    :math:`\sqrt{\mathrm{tr}\,\Sigma} \approx 1.8`), so a nonlinear pooled model can recognise the
    center and fit its rule, but from the same rows as Local with less capacity per center:
    **Local > Centralized > FedAvg ~ 0.5**; partner selection has no good partners to find. (iv)
    ``level="unit"``: same-unit centers share :math:`\delta_u`, so pooling a unit's centers is the
    oracle partner set, and a nonlinear Centralized model recognises the unit from :math:`v_u`:
    **Centralized ~ unit-pooled > Local**; a model shared by all units under per-center
    standardization averages the rules of the units holding both classes, from clearly below
    Local (several such units) to near perfect (a single one).

    Measured with ``OMP_NUM_THREADS=1 python benchmarks/fedprox_orderings.py`` (its
    ``measure_orderings``, about 75 s on one core):
    default Synthetic(1, 1), 230 centers, 71,000 stays, data seeds 0-2; mean test AUROC over the
    ``scored`` centers (train and test splits both with both classes); ``mid``: centers with
    ``0.05 < base_rate < 0.95``; Local, Pooled (FedAvg's view), Unit-pooled: logistic regression
    per center, on all centers, per care unit, on per-center standardized features;
    Centralized-MLP: a 64-unit MLP on all centers under the pooled standardization.

    ==========  ====  ======  ===  =====  ======  ===========  ===============
    level       seed  scored  mid  Local  Pooled  Unit-pooled  Centralized-MLP
    ==========  ====  ======  ===  =====  ======  ===========  ===============
    ``center``  0     69      63   0.893  0.532   0.590        0.852
    ``center``  1     63      58   0.923  0.485   0.567        0.846
    ``center``  2     68      54   0.886  0.558   0.613        0.848
    ``unit``    0     101     115  0.884  0.701   0.999        0.996
    ``unit``    1     64      76   0.878  0.910   0.998        0.997
    ``unit``    2     8       0    0.883  0.999   1.000        0.998
    ==========  ====  ======  ===  =====  ======  ===========  ===============

    (At ``level="center"`` Unit-pooled beats Pooled because a center's own rows weigh more in a
    pool of about 38 centers than of 230.)

Every draw comes from ``numpy_rng(seed, "fedprox_synthetic", ...)``: the same seed gives identical
data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lightning_fed.data.base import TableSource
from lightning_fed.data.center import PooledTable
from lightning_fed.data.partition import Partitioner
from lightning_fed.data.split import Split
from lightning_fed.data.synthetic import CHARLSON_COLUMNS, FEATURE_NAMES
from lightning_fed.data.synthetic_layout import (
    CARE_UNITS,
    center_layout,
    center_sizes,
    check_layout,
    row_years,
    site_attributes,
    site_labels,
)
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_number

__all__ = [
    "COVARIANCE_DECAY",
    "LEVELS",
    "NUM_CLASSES",
    "FedProxDraws",
    "FedProxSynthetic",
    "feature_variances",
]

#: The exponent of Li et al.'s feature covariance, ``Sigma_jj = j^{-COVARIANCE_DECAY}``.
COVARIANCE_DECAY = 1.2
#: Classes of the softmax model (binary: the library's tables have 0/1 labels).
NUM_CLASSES = 2
#: Where the draws are made: per center (Li et al.) or per care unit (shared by its centers).
LEVELS = ("center", "unit")
_STREAM = "fedprox_synthetic"


def feature_variances(dim: int = len(FEATURE_NAMES)) -> np.ndarray:
    r"""The diagonal of Li et al.'s :math:`\Sigma`: :math:`\Sigma_{jj} = j^{-1.2}`, ``j = 1..dim``."""
    return np.arange(1, dim + 1, dtype=np.float64) ** -COVARIANCE_DECAY


@dataclass(frozen=True, eq=False)
class FedProxDraws:
    r"""The latent draws behind one :class:`FedProxSynthetic` table (diagnostics and tests).

    Draw group ``g`` is a center (``level="center"``, ``G = C``) or a care unit in
    :data:`~lightning_fed.data.synthetic_layout.CARE_UNITS` order (``level="unit"``, ``G = 6``,
    drawn even for units without centers).

    Attributes:
        group: Draw group of each center ``[C]``.
        u: Model prior means :math:`u_g \sim \mathcal N(0, \alpha)` ``[G]``.
        B: Feature prior means :math:`B_g \sim \mathcal N(0, \beta)` ``[G]``.
        W: Softmax weights :math:`W_g` ``[G, 2, d]``, entries :math:`\mathcal N(u_g, 1)`.
        b: Softmax biases :math:`b_g` ``[G, 2]``, entries :math:`\mathcal N(u_g, 1)`.
        v: Feature means :math:`v_g` ``[G, d]``, entries :math:`\mathcal N(B_g, 1)`.
        variances: Diagonal of :math:`\Sigma` ``[d]``.
        row_center: Center index of each table row ``[N]``.
        logits: :math:`W_g x + b_g` of each row ``[N, 2]`` (``y = 1`` iff column 1 > column 0).
    """

    group: np.ndarray
    u: np.ndarray
    B: np.ndarray
    W: np.ndarray
    b: np.ndarray
    v: np.ndarray
    variances: np.ndarray
    row_center: np.ndarray
    logits: np.ndarray


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    r""":math:`\Phi(z) = \tfrac12 \operatorname{erfc}(-z / \sqrt 2)`, elementwise."""
    return np.array([0.5 * math.erfc(-float(t) / math.sqrt(2.0)) for t in np.ravel(z)]).reshape(np.shape(z))


class FedProxSynthetic(TableSource):
    r"""Li et al.'s (2020) Synthetic(alpha, beta) with 2 classes, one device per center (or per care unit).

    See the module docstring for the model, the descriptor and the orderings it produces. Sites
    are care unit x 2-year window (``"MICU 2130-2131"``), as in
    :class:`~lightning_fed.data.synthetic.TeacherICU`; ``build`` splits each center 80/10/10
    (stratified) and standardizes all 60 columns on the center's own train split.

    Args:
        num_centers: Number of centers (>= 1): one per (care unit, window) up to ``6 * 41 = 246``;
            beyond, sub-centers share a window (:mod:`~lightning_fed.data.synthetic_layout`), each
            its own device under ``level="center"``.
        num_stays: Total rows (>= ``num_centers * min_stays``).
        alpha: Variance of the model prior means :math:`u_g` (>= 0); the paper's Synthetic(alpha,
            beta) first argument. It does not change the labels (module docstring, Orderings).
        beta: Variance of the feature prior means :math:`B_g` (>= 0).
        level: ``"center"`` (Li et al.: every center its own draws) or ``"unit"`` (one draw per care
            unit, shared by its centers).
        size_tail: Lomax (Pareto II) shape of the center sizes (> 0); smaller = heavier tail.
        min_stays: Fewest rows per center (>= 10).
        partitioner: How rows become centers in :meth:`build`; ``None`` = :class:`Natural`
            (one center per site).
        seed: If given, fixes the data regardless of the run seed passed to :meth:`table` /
            :meth:`build` (so training seeds can vary over the same data).
        split: Per-center train / validation / test split, stratified by label, with an optional
            ``min_per_class`` guarantee (:class:`~lightning_fed.data.split.Split`); None: 80/10/10.

    Raises:
        ValueError: On an argument out of range (the message names it).
    """

    def __init__(
        self,
        num_centers: int = 230,
        num_stays: int = 71000,
        alpha: float = 1.0,
        beta: float = 1.0,
        level: str = "center",
        size_tail: float = 1.0,
        min_stays: int = 40,
        partitioner: Partitioner | None = None,
        seed: int | None = None,
        split: Split | None = None,
    ) -> None:
        self.num_centers, self.num_stays, self.min_stays, self.size_tail = check_layout(
            num_centers, num_stays, min_stays, size_tail
        )
        self.alpha = check_number("alpha", alpha, 0.0, strict=False)
        self.beta = check_number("beta", beta, 0.0, strict=False)
        if level not in LEVELS:
            raise ValueError(f"level must be 'center' or 'unit', got {level!r}")
        self.level = str(level)
        self._set_common(partitioner, seed, 0, split)

    def __repr__(self) -> str:
        return (
            f"FedProxSynthetic(num_centers={self.num_centers}, num_stays={self.num_stays}, "
            f"alpha={self.alpha}, beta={self.beta}, level={self.level!r}, size_tail={self.size_tail}, "
            f"min_stays={self.min_stays}, partitioner={self.partitioner!r}, seed={self.seed})"
        )

    def table(self, seed: int) -> PooledTable:
        """Generate the pooled rows.

        Args:
            seed: Run seed (ignored when ``self.seed`` is set).

        Returns:
            The pooled table; ``site`` is ``"<care unit> <start>-<end>"`` and ``attributes`` gives
            each site's ``care_unit``, ``window_start`` and ``base_rate`` (closed-form expected
            positive rate).
        """
        return self._generate(self.effective_seed(seed))[0]

    def _draw_groups(self, seed: int, n_groups: int) -> tuple[np.ndarray, ...]:
        """``u, B, W, b, v`` of every draw group, group ``g`` from its own stream."""
        d = len(FEATURE_NAMES)
        level = LEVELS.index(self.level)
        u, B = np.empty(n_groups), np.empty(n_groups)
        W, b = np.empty((n_groups, NUM_CLASSES, d)), np.empty((n_groups, NUM_CLASSES))
        v = np.empty((n_groups, d))
        for g in range(n_groups):
            rng = numpy_rng(seed, _STREAM, 0, level, g)
            u[g] = math.sqrt(self.alpha) * rng.standard_normal()
            B[g] = math.sqrt(self.beta) * rng.standard_normal()
            W[g] = u[g] + rng.standard_normal((NUM_CLASSES, d))
            b[g] = u[g] + rng.standard_normal(NUM_CLASSES)
            v[g] = B[g] + rng.standard_normal(d)
        return u, B, W, b, v

    def _generate(self, seed: int) -> tuple[PooledTable, FedProxDraws]:
        """The pooled table and the latent draws behind it (for diagnostics)."""
        unit_c, window_c = center_layout(self.num_centers)
        n_centers, d = len(unit_c), len(FEATURE_NAMES)
        group = np.arange(n_centers) if self.level == "center" else unit_c.copy()
        n_groups = n_centers if self.level == "center" else len(CARE_UNITS)
        u, B, W, b, v = self._draw_groups(seed, n_groups)
        variances = feature_variances(d)

        sizes = center_sizes(
            numpy_rng(seed, _STREAM, 1), unit_c, self.size_tail, self.min_stays, self.num_stays
        )
        site_c = np.repeat(np.arange(n_centers), sizes)
        g_r = group[site_c]

        rng = numpy_rng(seed, _STREAM, 2)
        x = v[g_r] + rng.standard_normal((len(site_c), d)) * np.sqrt(variances)
        logits = np.empty((len(site_c), NUM_CLASSES))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        for k in range(n_centers):
            rows = slice(bounds[k], bounds[k + 1])
            logits[rows] = x[rows] @ W[group[k]].T + b[group[k]]
        y = (logits[:, 1] > logits[:, 0]).astype(np.int64)  # argmax of softmax, ties to class 0

        delta, c = W[:, 1] - W[:, 0], b[:, 1] - b[:, 0]
        z = (np.einsum("gj,gj->g", delta, v) + c) / np.sqrt((delta**2 * variances).sum(axis=1))
        base_rate = _normal_cdf(z)[group]

        labels, starts = site_labels(unit_c, window_c)
        table = PooledTable(
            x=x,
            y=y,
            feature_names=FEATURE_NAMES,
            continuous=np.ones(d, dtype=bool),
            year=row_years(rng, starts, site_c),
            site=labels[site_c],
            charlson_columns=CHARLSON_COLUMNS,
            attributes=site_attributes(labels, unit_c, starts, base_rate),
        )
        draws = FedProxDraws(
            group=group, u=u, B=B, W=W, b=b, v=v, variances=variances, row_center=site_c, logits=logits
        )
        return table, draws
