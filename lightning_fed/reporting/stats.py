"""The report tables' statistics: mean and SD over seeds, and paired differences with t intervals.

:func:`mean_sd_by` gives per group the mean and sample SD (ddof 1) over seeds that every
``mean ± SD`` cell shows (:func:`lightning_fed.render.mean_sd`).

Two runs of different methods with the same seed see the same data (the same federation, splits
and initial draws), so the per-seed difference of their test AUROC removes the seed-to-seed spread
both share. Over the ``n`` seeds both methods have, with differences ``d_s = a_s - r_s``:

    d_bar = mean(d),   s_d = std(d, ddof=1),
    CI    = d_bar -/+ t_{(1+level)/2, n-1} * s_d / sqrt(n)

The t quantile is computed here (SciPy is not a dependency): the Student-t CDF through the
regularized incomplete beta function, ``P(T <= t) = 1 - I_{nu/(nu+t^2)}(nu/2, 1/2) / 2`` for
``t >= 0`` (Abramowitz & Stegun 26.5.27 and 26.7.1), evaluated by its continued fraction (modified Lentz)
and inverted by bisection to floating-point resolution (:func:`t_quantile`): no table, no normal
approximation, agreeing with ``scipy.stats.t.ppf`` to about 1e-12.

The interval agrees with ``scipy.stats.t.interval`` (tested against it), without making SciPy a
dependency.

Paired by center (:func:`center_paired_comparison`): the same seed gives both methods the same
test split of every center, so each center ``c`` of seed ``s`` gives a paired difference
``d_{s,c} = A_{method,s,c} - A_{ref,s,c}`` (centers whose AUROC is defined in both runs). The
estimate is the mean over seeds of each seed's mean over centers,
``d_bar = (1/S) sum_s (1/n_s) sum_c d_{s,c}``, and its 95 % interval is a hierarchical (two-stage)
percentile bootstrap, centers within seeds (Davison & Hinkley 1997, Sec. 3.8; Field & Welsh 2007):
each of ``B`` resamples draws ``S`` seeds with replacement and, within each drawn seed, its ``n_s``
centers with replacement, and takes the same double mean; the interval is the 2.5 / 97.5 %
quantiles of the ``B`` means. The draws come from one generator (``BOOTSTRAP_SEED`` unless given),
so a report is reproducible. With one seed it is the center bootstrap of that seed alone (it says
nothing about seed-to-seed variation, which the seed-paired t interval beside it does).

Everything here is a pure function over plain numbers (mappings seed -> value, sequences) or
polars frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from lightning_fed.render import interval

__all__ = [
    "BETTER",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "NOT_APPLICABLE",
    "WITHIN_NOISE",
    "WORSE",
    "CenterPairedDifference",
    "PairedDifference",
    "by_seed",
    "center_paired_comparison",
    "format_interval",
    "hierarchical_bootstrap",
    "mean_sd_by",
    "paired_ci",
    "paired_comparison",
    "paired_values",
    "regularized_incomplete_beta",
    "student_t_cdf",
    "t_quantile",
    "verdict",
]

BETTER = "better"
WORSE = "worse"
WITHIN_NOISE = "within noise"
NOT_APPLICABLE = "n/a"

_EPS = 1e-16
_TINY = 1e-300
_MAX_TERMS = 10_000


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of ``I_x(a, b)`` (Numerical Recipes' ``betacf``), modified Lentz."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _ibeta(a: float, b: float, x: float, y: float) -> float:
    """``I_x(a, b)`` given both ``x`` and ``y = 1 - x`` (each exact, so neither is a difference)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, y) / b


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``.

    Args:
        a: First shape parameter, ``> 0``.
        b: Second shape parameter, ``> 0``.
        x: Upper integration limit in ``[0, 1]``.

    Returns:
        ``B(x; a, b) / B(a, b)`` (continued fraction, about 1e-13 absolute for moderate ``a, b``).

    Raises:
        ValueError: If a parameter is outside its domain.
    """
    if not (a > 0 and b > 0):
        raise ValueError(f"incomplete beta needs a > 0 and b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete beta needs 0 <= x <= 1, got x={x}")
    return _ibeta(a, b, x, 1.0 - x)


def _check_df(df: float) -> None:
    if not (df > 0 and math.isfinite(df)):
        raise ValueError(f"Student's t needs finite degrees of freedom > 0, got {df}")


def student_t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom.

    Args:
        t: The point.
        df: Degrees of freedom (``> 0``; need not be an integer).

    Returns:
        The CDF at ``t``.
    """
    _check_df(df)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    t2 = t * t
    tail = 0.5 * _ibeta(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (e.g. ``t_{0.975, 4}``).

    Solves ``I_x(df/2, 1/2) = 2 min(p, 1-p)`` by bisection down to adjacent floating-point
    numbers, on ``x = df/(df+t^2)``, or for ``p`` near 1/2 on ``1 - x`` against
    ``I_{1-x}(1/2, df/2) = |2p - 1|``, then ``t = sqrt(df (1-x) / x)``, signed. No table and no
    normal approximation: relative error about 1e-12 or better for ``df`` up to 1e3.

    Args:
        p: Probability in ``(0, 1)``.
        df: Degrees of freedom (``> 0``).

    Returns:
        ``t`` with ``P(T <= t) = p``: ``t_{0.975,1} = 12.706``, ``t_{0.975,4} = 2.7764``.

    Raises:
        ValueError: If ``p`` is not in ``(0, 1)`` or ``df`` is not positive and finite.
    """
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if p == 0.5:
        return 0.0
    a = df / 2.0
    # With x = df/(df+t^2) and y = 1 - x = t^2/(df+t^2): I_x(a, 1/2) = 2 min(p, 1-p) (the two
    # tails) and I_y(1/2, a) = |2p - 1| (the centre); the smaller right side is exact for a float
    # p. Solve that equation (relative precision where its side is tiny) by bisection on its
    # variable; the other variable, 1 - mid, is exact whenever it is the small one.
    tails, centre = 2.0 * min(p, 1.0 - p), abs(2.0 * p - 1.0)
    on_tails = tails <= centre
    lo, hi = 0.0, 1.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if on_tails:
            below = _ibeta(a, 0.5, mid, 1.0 - mid) < tails
        else:
            below = _ibeta(0.5, a, mid, 1.0 - mid) < centre
        lo, hi = (mid, hi) if below else (lo, mid)
    v = 0.5 * (lo + hi)
    num, den = (1.0 - v, v) if on_tails else (v, 1.0 - v)
    t = math.sqrt(df * num / den) if den > 0 else math.inf  # inf: beyond the largest float
    return t if p > 0.5 else -t


def by_seed(seeds: Sequence[int], values: Sequence[float | None]) -> dict[int, float | None]:
    """Pair a seed column with a value column: the ``seed -> value`` mapping the comparisons take.

    Args:
        seeds: One seed per run (a table's ``seed`` column).
        values: The metric of the same runs, in the same order; a missing value stays ``None``
            (:func:`paired_values` leaves that seed out).

    Returns:
        ``{seed: value}`` with the seeds as ``int`` and the values as ``float`` (or ``None``).

    Raises:
        ValueError: If the two columns differ in length, or a seed appears twice (two runs of one
            method at one seed cannot be paired with one run of another).
    """
    seeds, values = list(seeds), list(values)
    if len(seeds) != len(values):
        raise ValueError(f"by_seed: {len(seeds)} seeds but {len(values)} values; pass two columns of a table")
    out: dict[int, float | None] = {}
    for s, v in zip(seeds, values, strict=True):
        if int(s) in out:
            raise ValueError(f"by_seed: seed {int(s)} appears twice; filter the table to one run per seed")
        out[int(s)] = None if v is None else float(v)
    return out


def paired_values(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> tuple[list[int], list[float]]:
    """Seeds both methods have (with finite values) and the differences ``values - reference``.

    Args:
        values: Seed -> metric of the compared method.
        reference: Seed -> metric of the reference method.

    Returns:
        The shared seeds (ascending) and, per seed, ``values[s] - reference[s]``. A seed only one
        side has, or whose value is missing or not finite on either side, is left out.
    """

    def usable(v: float | None) -> bool:
        return v is not None and math.isfinite(v)

    seeds = sorted(s for s in values if s in reference and usable(values[s]) and usable(reference[s]))
    return seeds, [float(values[s]) - float(reference[s]) for s in seeds]


def paired_ci(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean paired difference and its two-sided Student-t confidence interval.

    Args:
        diffs: Per-seed differences, at least two.
        level: Confidence level in ``(0, 1)``.

    Returns:
        ``(d_bar, low, high)`` with ``low, high = d_bar -/+ t_{(1+level)/2, n-1} s_d / sqrt(n)``,
        ``s_d`` the sample standard deviation (ddof=1).

    Raises:
        ValueError: With fewer than two differences or a level outside ``(0, 1)``.
    """
    n = len(diffs)
    if n < 2:
        raise ValueError(f"a paired confidence interval needs at least 2 differences, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    mean = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def verdict(low: float | None, high: float | None) -> str:
    """Reading of a confidence interval of ``method - reference`` (higher is better).

    Returns:
        ``"better"`` when the whole interval is above 0, ``"worse"`` when below, ``"within noise"``
        when it contains 0, ``"n/a"`` when there is no interval.
    """
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return NOT_APPLICABLE
    if low > 0:
        return BETTER
    if high < 0:
        return WORSE
    return WITHIN_NOISE


@dataclass(frozen=True)
class PairedDifference:
    """A method against the reference over their shared seeds.

    Attributes:
        n_paired: Number of shared seeds used.
        mean: Mean difference (``None`` with no shared seed).
        ci_low: Lower CI bound (``None`` with fewer than two shared seeds).
        ci_high: Upper CI bound (``None`` with fewer than two shared seeds).
        verdict: ``"better"``, ``"worse"``, ``"within noise"`` or ``"n/a"`` (see :func:`verdict`).
    """

    n_paired: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str


def paired_comparison(
    values: Mapping[int, float | None], reference: Mapping[int, float | None], level: float = 0.95
) -> PairedDifference:
    """Compare a method to the reference seed by seed (:func:`paired_values`, :func:`paired_ci`).

    Args:
        values: Seed -> metric of the compared method.
        reference: Seed -> metric of the reference method.
        level: Confidence level of the interval.

    Returns:
        The comparison; with one shared seed only the mean difference, with none nothing, and the
        verdict ``"n/a"`` in both cases.
    """
    _, diffs = paired_values(values, reference)
    if len(diffs) < 2:
        mean = diffs[0] if diffs else None
        return PairedDifference(len(diffs), mean, None, None, NOT_APPLICABLE)
    mean, low, high = paired_ci(diffs, level)
    return PairedDifference(len(diffs), mean, low, high, verdict(low, high))


#: Resamples of the hierarchical bootstrap (percentile bounds move by ~0.001 AUROC between seeds).
BOOTSTRAP_RESAMPLES = 2000
#: Seed of the report's bootstrap generator (``numpy.random.default_rng``).
BOOTSTRAP_SEED = 0


def hierarchical_bootstrap(
    diffs: Mapping[int, Sequence[float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Mean over seeds of the per-seed mean difference, with a seeds-then-centers bootstrap interval.

    Args:
        diffs: Seed -> that seed's per-center paired differences (each non-empty).
        resamples: Bootstrap resamples ``B``.
        seed: Seed of the generator every draw comes from.
        level: Coverage of the percentile interval.

    Returns:
        ``(d_bar, low, high)`` (module docstring).
    """
    groups = [np.asarray(diffs[k], dtype=np.float64) for k in sorted(diffs)]
    if not groups or any(g.size == 0 for g in groups):
        raise ValueError("hierarchical_bootstrap needs at least one seed, each with at least one center")
    estimate = float(np.mean([g.mean() for g in groups]))
    rng = np.random.default_rng(seed)
    s = len(groups)
    chosen = rng.integers(0, s, size=(resamples, s))
    means = np.stack([g[rng.integers(0, g.size, size=(resamples, s, g.size))].mean(-1) for g in groups])
    stat = np.take_along_axis(means, chosen[None], axis=0)[0].mean(1)  # means[chosen[b, j], b, j]
    low, high = np.quantile(stat, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return estimate, float(low), float(high)


@dataclass(frozen=True)
class CenterPairedDifference:
    """A method against the reference center by center within each shared seed.

    Attributes:
        n_seeds: Shared seeds with at least one center paired.
        n_pairs: Center pairs (both AUROCs defined) over those seeds.
        mean: Mean over seeds of the per-seed mean difference (None without a pair).
        ci_low, ci_high: Hierarchical bootstrap bounds (None with fewer than two pairs).
        verdict: :func:`verdict` of the interval.
    """

    n_seeds: int
    n_pairs: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str


def center_paired_comparison(
    values: Mapping[int, Mapping[str, float]],
    reference: Mapping[int, Mapping[str, float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> CenterPairedDifference:
    """Pair two methods center by center within each seed both have (module docstring).

    Args:
        values: Seed -> {center name: test AUROC} of the compared method (NaN: undefined).
        reference: The same of the reference method.
        resamples, seed, level: As :func:`hierarchical_bootstrap`.

    Returns:
        The comparison (``n/a`` with fewer than two center pairs).
    """
    diffs: dict[int, list[float]] = {}
    for s in sorted(set(values) & set(reference)):
        pairs = [
            values[s][c] - reference[s][c]
            for c in sorted(set(values[s]) & set(reference[s]))
            if values[s][c] is not None
            and reference[s][c] is not None
            and not math.isnan(values[s][c])
            and not math.isnan(reference[s][c])
        ]
        if pairs:
            diffs[s] = pairs
    n_pairs = sum(len(d) for d in diffs.values())
    if n_pairs == 0:
        return CenterPairedDifference(0, 0, None, None, None, NOT_APPLICABLE)
    if n_pairs < 2:
        only = next(iter(diffs.values()))[0]
        return CenterPairedDifference(len(diffs), 1, only, None, None, NOT_APPLICABLE)
    mean, low, high = hierarchical_bootstrap(diffs, resamples, seed, level)
    return CenterPairedDifference(len(diffs), n_pairs, mean, low, high, verdict(low, high))


#: ``"+d [+low, +high]"``: an alias of :func:`lightning_fed.render.interval` kept for one release.
format_interval = interval


def mean_sd_by(rows: pl.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pl.DataFrame:
    """``<column>_mean`` / ``<column>_sd`` (sample SD, ddof 1) per group of ``keys``, with ``seeds``
    (distinct seeds), sorted by ``keys``; an empty frame without rows."""
    if rows.height == 0:
        return pl.DataFrame()
    keys = list(keys)
    return (
        rows.group_by(keys)
        .agg(
            *[pl.col(c).mean().alias(f"{c}_mean") for c in columns],
            *[pl.col(c).std(ddof=1).alias(f"{c}_sd") for c in columns],
            pl.col("seed").n_unique().alias("seeds"),
        )
        .sort(keys)
    )
