"""The statistics module (reporting/stats.py): paired differences and the Student-t quantile against
closed forms, textbook tables, SciPy (when installed) and hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_fed.reporting.stats import (
    BETTER,
    NOT_APPLICABLE,
    WITHIN_NOISE,
    WORSE,
    by_seed,
    paired_ci,
    paired_comparison,
    paired_values,
    regularized_incomplete_beta,
    student_t_cdf,
    t_quantile,
    verdict,
)

PROBS = [1e-12, 1e-6, 0.001, 0.025, 0.1, 0.3, 0.4999, 0.5001, 0.7, 0.9, 0.975, 0.999, 1 - 1e-9]


@pytest.mark.parametrize(("df", "expected", "tol"), [(1, 12.706, 5e-4), (2, 4.3027, 5e-5), (4, 2.7764, 5e-5)])
def test_t_quantile_matches_the_printed_tables(df: int, expected: float, tol: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=tol)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=tol)


def test_t_quantile_table_for_small_samples() -> None:
    """Two-sided 95 % critical values for df = 3, 5, 9, 10, 19, 29, 30 (e.g. NIST/SEMATECH table)."""
    table = {3: 3.182, 5: 2.571, 9: 2.262, 10: 2.228, 19: 2.093, 29: 2.045, 30: 2.042}
    for df, expected in table.items():
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4), df


@pytest.mark.parametrize("p", PROBS)
def test_t_quantile_closed_forms(p: float) -> None:
    """df=1 (Cauchy): tan(pi (p - 1/2)), written sign(p - 1/2) / tan(pi min(p, 1-p)) to avoid
    cancellation in the tails; df=2: (2p-1)/sqrt(2p(1-p)); df=4: with a = 4p(1-p),
    q = cos(arccos(sqrt a)/3)/sqrt a, t = sign(p - 1/2) 2 sqrt(q - 1)."""
    cauchy = math.copysign(1.0, p - 0.5) / math.tan(math.pi * min(p, 1 - p))
    assert t_quantile(p, 1) == pytest.approx(cauchy, rel=1e-9)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
    a = 4 * p * (1 - p)
    q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
    assert t_quantile(p, 4) == pytest.approx(math.copysign(2 * math.sqrt(q - 1), p - 0.5), rel=1e-6)


@pytest.mark.parametrize("df", [0.5, 1, 2, 3, 4, 7, 12, 30, 100])
def test_t_quantile_inverts_the_cdf_and_is_odd(df: float) -> None:
    for p in PROBS:
        t = t_quantile(p, df)
        assert student_t_cdf(t, df) == pytest.approx(p, rel=1e-10)
        if p > 0.5:  # then 1 - p is exact
            assert t_quantile(1 - p, df) == pytest.approx(-t, rel=1e-12)
    assert t_quantile(0.5, df) == 0.0


def test_t_cdf_closed_forms() -> None:
    for t in [-40.0, -3.0, -0.5, 0.0, 1e-6, 0.7, 2.5, 1e3]:
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-14)
        assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-14)
    assert student_t_cdf(math.inf, 3) == 1.0 and student_t_cdf(-math.inf, 3) == 0.0


def test_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in [1, 2, 3, 4, 5, 8, 15, 29, 60, 250, 2.5]:
        for p in PROBS:
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9, abs=1e-12), (df, p)
        for t in [-8.0, -2.0, -0.3, 0.0, 0.4, 1.96, 4.0, 25.0]:
            assert student_t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12), (df, t)


def test_incomplete_beta_closed_forms() -> None:
    for x in [0.0, 1e-9, 0.05, 0.3, 0.5, 0.77, 0.999, 1.0]:
        assert regularized_incomplete_beta(1, 1, x) == pytest.approx(x, abs=1e-15)
        assert regularized_incomplete_beta(3, 1, x) == pytest.approx(x**3, abs=1e-14)
        assert regularized_incomplete_beta(1, 4, x) == pytest.approx(1 - (1 - x) ** 4, abs=1e-14)
        arcsine = 2 / math.pi * math.asin(math.sqrt(x))
        assert regularized_incomplete_beta(0.5, 0.5, x) == pytest.approx(arcsine, abs=1e-13)


def test_domain_errors() -> None:
    for p in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="0 < p < 1"):
            t_quantile(p, 3)
    for df in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="degrees of freedom"):
            t_quantile(0.9, df)
    with pytest.raises(ValueError, match="0 <= x <= 1"):
        regularized_incomplete_beta(1, 1, 1.5)
    with pytest.raises(ValueError, match="at least 2"):
        paired_ci([0.1])
    with pytest.raises(ValueError, match="level"):
        paired_ci([0.1, 0.2], level=1.0)


# Five seeds, reference r and method a; d = a - r = [0.02, 0.02, -0.01, 0.04, 0.02].
REF = {0: 0.80, 1: 0.81, 2: 0.79, 3: 0.82, 4: 0.80}
METHOD = {0: 0.82, 1: 0.83, 2: 0.78, 3: 0.86, 4: 0.82}


def test_five_seed_hand_computation() -> None:
    """d = [0.02, 0.02, -0.01, 0.04, 0.02]: sum 0.09, d_bar = 0.018. Deviations [0.002, 0.002,
    -0.028, 0.022, 0.002], squares [4, 4, 784, 484, 4] e-6, sum 1280e-6; s_d^2 = 1280e-6 / 4 =
    3.2e-4, so s_d / sqrt(5) = sqrt(6.4e-5) = 0.008. t_{0.975,4} = 2.776445: half width
    2.776445 * 0.008 = 0.0222116, CI = [0.018 - 0.0222116, 0.018 + 0.0222116] = [-0.0042116,
    0.0402116]; it contains 0: within noise."""
    seeds, diffs = paired_values(METHOD, REF)
    assert seeds == [0, 1, 2, 3, 4]
    assert diffs == pytest.approx([0.02, 0.02, -0.01, 0.04, 0.02])
    mean, low, high = paired_ci(diffs)
    assert mean == pytest.approx(0.018, abs=1e-12)
    assert (high - low) / 2 == pytest.approx(2.776445105 * 0.008, rel=1e-9)
    assert low == pytest.approx(-0.0042116, abs=1e-7) and high == pytest.approx(0.0402116, abs=1e-7)
    result = paired_comparison(METHOD, REF)
    assert (result.n_paired, result.verdict) == (5, WITHIN_NOISE)
    assert (result.mean, result.ci_low, result.ci_high) == pytest.approx((mean, low, high))
    assert paired_ci(np.asarray(diffs)) == pytest.approx((mean, low, high))  # arrays work too


def test_other_confidence_level() -> None:
    """Same data at 90 %: t_{0.95,4} = 2.131847, half width 0.0170548."""
    mean, low, high = paired_ci([0.02, 0.02, -0.01, 0.04, 0.02], level=0.90)
    assert (high - low) / 2 == pytest.approx(2.131847 * 0.008, rel=1e-6) and mean == pytest.approx(0.018)


def test_unpaired_seeds_are_ignored() -> None:
    method = METHOD | {7: 0.99, 8: None}  # seed 7 has no reference run, seed 8 no value
    ref = REF | {9: 0.10, 8: 0.5, 5: math.nan}  # seed 9: no method run; seed 5: not finite
    assert paired_values(method, ref)[0] == [0, 1, 2, 3, 4]
    assert paired_comparison(method, ref) == paired_comparison(METHOD, REF)


def test_verdicts() -> None:
    """Shifting every difference by +-0.01 moves d_bar to 0.028 (CI [+0.0058, +0.0502]: better)
    or to -0.028 for the mirrored data (worse); s_d is unchanged."""
    better = {s: v + 0.01 for s, v in METHOD.items()}
    assert paired_comparison(better, REF).verdict == BETTER
    assert paired_comparison(better, REF).ci_low == pytest.approx(0.028 - 0.0222116, abs=1e-7)
    assert paired_comparison(REF, better).verdict == WORSE
    one = paired_comparison({0: 0.9}, {0: 0.8, 1: 0.7})
    assert (one.n_paired, one.mean, one.ci_low, one.verdict) == (1, pytest.approx(0.1), None, NOT_APPLICABLE)
    none = paired_comparison({3: 0.9}, {0: 0.8})
    assert (none.n_paired, none.mean, none.verdict) == (0, None, NOT_APPLICABLE)
    assert verdict(-0.01, 0.02) == WITHIN_NOISE and verdict(0.0, 0.0) == WITHIN_NOISE
    assert verdict(None, None) == NOT_APPLICABLE
    same = paired_comparison({0: 0.7, 1: 0.8}, {0: 0.6, 1: 0.7})  # d = [0.1, 0.1]: s_d ~ 0, CI ~ [0.1, 0.1]
    assert same.verdict == BETTER and same.mean == pytest.approx(0.1)


def test_by_seed_pairs_columns_and_keeps_missing_values() -> None:
    import polars as pl

    frame = pl.DataFrame({"seed": [2026, 2025, 2027], "acc": [71.5, 70.0, None]})
    got = by_seed(frame["seed"], frame["acc"])
    assert got == {2026: 71.5, 2025: 70.0, 2027: None}
    assert all(type(k) is int for k in got) and all(type(v) is float for v in got.values() if v is not None)
    # The missing seed drops out of the pairing, as paired_values documents.
    assert paired_values(got, {2025: 69.0, 2026: 70.5, 2027: 1.0}) == ([2025, 2026], [1.0, 1.0])


def test_by_seed_refuses_ambiguous_input() -> None:
    with pytest.raises(ValueError, match="seed 2025 appears twice"):
        by_seed([2025, 2025], [1.0, 2.0])
    with pytest.raises(ValueError, match="2 seeds but 1 values"):
        by_seed([2025, 2026], [1.0])


@pytest.mark.parametrize(
    ("diffs", "t_table"),
    [
        ([1.0, 2.0, 3.0], 4.303),  # df 2
        ([0.5, -0.1, 0.3, 0.9, 0.2, 0.4], 2.571),  # df 5
        ([0.02, 0.02, -0.01, 0.04, 0.02, 0.0, 0.03, 0.01, 0.05, -0.02], 2.262),  # df 9
    ],
)
def test_paired_interval_against_the_t_table(diffs: list[float], t_table: float) -> None:
    """The 95 % interval is d_bar -/+ t s_d / sqrt(n) with the printed t_{0.975, n-1} (3 decimals)."""
    n = len(diffs)
    mean = sum(diffs) / n
    half = t_table * math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) / math.sqrt(n)
    got_mean, low, high = paired_ci(diffs)
    assert got_mean == pytest.approx(mean) and (low + high) / 2 == pytest.approx(mean)
    # The table's t has 3 decimals: the half width agrees to its rounding (0.0005 / t).
    assert (high - low) / 2 == pytest.approx(half, rel=0.0005 / t_table)


def test_paired_interval_against_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    diffs = [0.5, -0.1, 0.3, 0.9, 0.2, 0.4]
    _, low, high = paired_ci(diffs)
    ref = scipy_stats.t.interval(0.95, len(diffs) - 1, loc=np.mean(diffs), scale=scipy_stats.sem(diffs))
    assert (low, high) == pytest.approx(ref, rel=1e-10)


def test_old_import_path_is_the_same_module() -> None:
    """``lightning_fed.reporting.paired`` (notebooks) serves the statistics module's objects."""
    from lightning_fed.reporting import paired, stats

    assert paired.paired_ci is stats.paired_ci and paired.t_quantile is stats.t_quantile
