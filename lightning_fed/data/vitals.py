"""First-24h vital-sign summaries shared by the real-data loaders (ABPS Sec. 6.1).

The ABPS feature schema summarizes seven vitals over the first 24 hours of an ICU stay as
``{mean, min, max}`` (21 columns, named as in the synthetic generator: ``heart_rate_mean``, ...,
``temperature_max``). Loaders turn their source tables into a long frame of
``(id, vital, value)`` observations inside the window; :func:`summarize_vitals` drops values
outside the physiological ranges in :data:`VITAL_RANGES` (charting errors, wrong units) and
aggregates per id. Stays without any valid observation of a vital get NaN, which
:func:`~lightning_fed.data.center.build_federation` imputes per center.
"""

from __future__ import annotations

import polars as pl

__all__ = ["VITALS", "VITAL_COLUMNS", "VITAL_RANGES", "summarize_vitals"]

#: The seven vitals, in the synthetic schema's order.
VITALS: tuple[str, ...] = ("heart_rate", "sbp", "dbp", "mbp", "resp_rate", "spo2", "temperature")
#: Accepted open ranges ``(low, high)`` per vital (bpm, mmHg, breaths/min, %, degrees Celsius).
VITAL_RANGES: dict[str, tuple[float, float]] = {
    "heart_rate": (0.0, 300.0),
    "sbp": (0.0, 400.0),
    "dbp": (0.0, 300.0),
    "mbp": (0.0, 300.0),
    "resp_rate": (0.0, 70.0),
    "spo2": (0.0, 100.01),
    "temperature": (25.0, 45.0),
}
#: The 21 summary columns: ``<vital>_mean``, ``<vital>_min``, ``<vital>_max`` per vital.
VITAL_COLUMNS: tuple[str, ...] = tuple(f"{v}_{s}" for v in VITALS for s in ("mean", "min", "max"))


def summarize_vitals(obs: pl.LazyFrame | pl.DataFrame, id_column: str) -> pl.DataFrame:
    """Mean / min / max per id and vital after the physiological range filter.

    Args:
        obs: Long observations with columns ``id_column``, ``vital`` (one of :data:`VITALS`) and
            ``value`` (float, already in the units of :data:`VITAL_RANGES`).
        id_column: The stay id column.

    Returns:
        One row per id having at least one valid observation: ``id_column`` then the 21
        :data:`VITAL_COLUMNS` (Float64, null where the vital has no valid value).
    """
    lazy = obs.lazy() if isinstance(obs, pl.DataFrame) else obs
    in_range = pl.lit(False)
    for vital, (low, high) in VITAL_RANGES.items():
        in_range = in_range | (
            (pl.col("vital") == vital) & (pl.col("value") > low) & (pl.col("value") < high)
        )
    aggs = []
    for vital in VITALS:
        val = pl.col("value").filter(pl.col("vital") == vital)
        aggs += [
            val.mean().alias(f"{vital}_mean"),
            val.min().alias(f"{vital}_min"),
            val.max().alias(f"{vital}_max"),
        ]
    return (
        lazy.select(pl.col(id_column), pl.col("vital").cast(pl.Utf8), pl.col("value").cast(pl.Float64))
        .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan() & in_range)
        .group_by(id_column)
        .agg(aggs)
        .sort(id_column)
        .collect()
        .with_columns([pl.col(c).cast(pl.Float64) for c in VITAL_COLUMNS])
    )
