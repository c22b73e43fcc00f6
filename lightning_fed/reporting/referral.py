"""The referral tables of several EdgeDRM runs in one (``lightning-fed report`` over a sweep).

Every run folder holding a ``referral.csv`` (written by ``lightning-fed refer``) contributes its
rows with the run folder's name in front, so a tier or topology grid reads as one table: per run,
router and prediction rule, accuracy, balanced accuracy, calls and incident scores per query, and
the workload columns (share of calls per tier, calls per 100 arrivals, peak share).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

__all__ = ["collect_referrals"]


def collect_referrals(root: Path) -> pl.DataFrame:
    """All run folders' ``referral.csv`` under ``root`` (recursively), with a leading ``run`` column.

    Only folders holding a ``summary.json`` count (a report folder's combined table is not a run).
    """
    frames = []
    for path in sorted(Path(root).rglob("referral.csv")):
        if not (path.parent / "summary.json").is_file():
            continue
        table = pl.read_csv(path)
        frames.append(table.select(pl.lit(path.parent.name).alias("run"), pl.all()))
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
