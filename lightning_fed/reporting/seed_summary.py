"""Mean and sample SD over seeds per group, and its ``mean ± SD`` cell: what the EdgeDRM tables share."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

__all__ = ["mean_sd_by", "mean_sd_cell"]


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


def mean_sd_cell(row: dict, column: str, spec: str = ".2f") -> str:
    """``mean ± SD`` of ``column`` in a :func:`mean_sd_by` row; the mean alone with one seed, ``-``
    without a value."""
    mean, sd = row[f"{column}_mean"], row[f"{column}_sd"]
    if mean is None:
        return "-"
    return f"{mean:{spec}}" if sd is None else f"{mean:{spec}} ± {sd:{spec}}"
