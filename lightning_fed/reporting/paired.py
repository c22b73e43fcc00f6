"""Alias of :mod:`lightning_fed.reporting.stats` (the paired differences).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.stats import (
    BETTER,
    NOT_APPLICABLE,
    WITHIN_NOISE,
    WORSE,
    PairedDifference,
    by_seed,
    format_interval,
    paired_ci,
    paired_comparison,
    paired_values,
    regularized_incomplete_beta,
    student_t_cdf,
    t_quantile,
    verdict,
)

__all__ = [
    "BETTER",
    "NOT_APPLICABLE",
    "WITHIN_NOISE",
    "WORSE",
    "PairedDifference",
    "by_seed",
    "format_interval",
    "paired_ci",
    "paired_comparison",
    "paired_values",
    "regularized_incomplete_beta",
    "student_t_cdf",
    "t_quantile",
    "verdict",
]
