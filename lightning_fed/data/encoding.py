"""Shared table encoding for the real-data loaders: one-hot columns and the pooled table (ABPS Sec. 6.1).

The loaders build one polars frame per cohort (a row per stay) and hand it to
:func:`to_pooled_table`, which checks it and makes the :class:`~lightning_fed.data.center.PooledTable`.
Categorical attributes are one-hot encoded by :func:`one_hot` with a fixed, data-independent column
order (levels sorted) and an ``other`` bucket for rare levels; missing values are their own
``unknown`` level. The level set is a schema choice read from the pooled cohort (no statistic is
fitted on it), so every center gets the same columns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from lightning_fed.data.center import PooledTable

__all__ = ["OTHER", "UNKNOWN", "one_hot", "sanitize", "to_pooled_table"]

#: Bucket for levels rarer than ``min_count``.
OTHER = "other"
#: Level of a missing or empty value.
UNKNOWN = "unknown"


def sanitize(text: str) -> str:
    """Column-name-safe form of a level (``"Med-Surg ICU"`` -> ``"Med_Surg_ICU"``)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", str(text)).strip("_") or "blank"


def one_hot(
    frame: pl.DataFrame, column: str, prefix: str, min_count: int = 1
) -> tuple[pl.DataFrame, list[str]]:
    """Replace ``column`` by 0/1 columns ``<prefix>_<level>``.

    Args:
        frame: The cohort, one row per stay.
        column: The categorical column (string; null or blank = :data:`UNKNOWN`).
        prefix: Column-name prefix.
        min_count: Levels with fewer rows go to the :data:`OTHER` bucket.

    Returns:
        The frame without ``column`` but with the indicator columns, and their names (levels sorted,
        ``other`` last when present).
    """
    level = pl.col(column).cast(pl.Utf8).str.strip_chars()
    level = pl.when(level.is_null() | (level == "")).then(pl.lit(UNKNOWN)).otherwise(level)
    levels = frame.select(level.alias("_level"))["_level"]
    counts = levels.value_counts()
    common = sorted(counts.filter(pl.col("count") >= min_count)["_level"].to_list())
    rare = counts.filter(pl.col("count") < min_count).height > 0
    bucket = pl.when(level.is_in(common)).then(level).otherwise(pl.lit(OTHER))
    frame = frame.with_columns(bucket.alias("_level"))
    names: list[str] = []
    exprs = []
    for lev in [*common, *([OTHER] if rare and OTHER not in common else [])]:
        name = f"{prefix}_{sanitize(lev)}"
        if name in names:  # two levels sanitizing alike share a column
            continue
        names.append(name)
        same = [c for c in [*common, OTHER] if f"{prefix}_{sanitize(c)}" == name]
        exprs.append(pl.col("_level").is_in(same).cast(pl.Float64).alias(name))
    return frame.with_columns(exprs).drop(column, "_level"), names


def to_pooled_table(
    frame: pl.DataFrame,
    features: Sequence[str],
    continuous: Sequence[str],
    label: str,
    year: str,
    site: str,
    charlson_columns: Sequence[str] = (),
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
) -> PooledTable:
    """A :class:`PooledTable` from a cohort frame (features float, NaN where missing).

    Args:
        frame: One row per stay.
        features: Feature columns, in order.
        continuous: The features to standardize per center.
        label: 0/1 label column.
        year: Year column (for the descriptor's mean year).
        site: Center label column.
        charlson_columns: The comorbidity flag columns (for the descriptor).
        attributes: Per-site attributes.

    Returns:
        The pooled table.
    """
    x = frame.select([pl.col(c).cast(pl.Float64).fill_null(float("nan")) for c in features]).to_numpy()
    cont = set(continuous)
    return PooledTable(
        x=np.ascontiguousarray(x, dtype=np.float64),
        y=frame[label].cast(pl.Int64).to_numpy(),
        feature_names=tuple(features),
        continuous=np.array([c in cont for c in features], dtype=bool),
        year=frame[year].cast(pl.Float64).to_numpy(),
        site=frame[site].cast(pl.Utf8).to_numpy().astype(str),
        charlson_columns=tuple(charlson_columns),
        attributes=dict(attributes or {}),
    )
