"""The referral tables of several EdgeDRM runs in one (``lightning-fed report`` over a sweep).

Every run folder holding a ``referral.csv`` (written by ``lightning-fed refer``) contributes its
rows with the run folder's name in front, so a tier or topology grid reads as one table: per run,
router and prediction rule, accuracy, balanced accuracy, calls and incident scores per query, and
the workload columns (share of calls per tier, calls per 100 arrivals, peak share).

:func:`tier_table` / :func:`tier_markdown` condense the hospital-tier runs into the paper's Table 4
(EdgeDRM App. D.1): per graph (``Tiers-layered`` / ``Tiers-shortcut``, keyed by the topology's
``shortcut`` flag, never pooled) and condition (EdgeDRM-NR, history without prior, history with
prior; weighted-history predictions), mean +/- sample SD over seeds of the accuracy, calls per
query, the large tier's share of calls and calls per 100 arrivals, and the peak client share.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import yaml

__all__ = [
    "TIER_CONDITIONS",
    "collect_referrals",
    "referral_runs",
    "tier_markdown",
    "tier_rows",
    "tier_table",
]

#: Table 4's conditions: router label -> condition name, in the paper's order.
TIER_CONDITIONS = {
    "EdgeDRM-NR": "EdgeDRM-NR",
    "EdgeDRM w/o prior": "History, no prior",
    "EdgeDRM": "History + prior",
}
#: Table 4's quantities: ``referral.csv`` column -> header (accuracy in percent; the markdown gives the
#: peak share 3 decimals: EdgeDRM-NR's is 100 / 32 = 3.125).
_TIER_COLUMNS = {
    "accuracy": "Accuracy (%)",
    "calls_per_query": "Calls/query",
    "share_large": "Large share (%)",
    "calls_per_100_large": "Large calls/100",
    "peak_share": "Peak share (%)",
}


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


def referral_runs(root: Path) -> Iterator[tuple[Path, dict[str, Any], pl.DataFrame]]:
    """``(run folder, resolved config, referral table)`` of every finished run under ``root`` that
    ``lightning-fed refer`` evaluated (a ``referral.csv`` beside ``summary.json`` and ``config.yaml``),
    in sorted path order: what the Table 1 / 4 / 5 readers share."""
    for path in sorted(Path(root).rglob("referral.csv")):
        run = path.parent
        if not (run / "summary.json").is_file() or not (run / "config.yaml").is_file():
            continue
        yield run, yaml.safe_load((run / "config.yaml").read_text()) or {}, pl.read_csv(path)


def tier_rows(root: Path, rule: str = "weighted history") -> pl.DataFrame:
    """One row per (tier run, Table 4 condition): ``run``, ``graph``, ``seed``, ``condition``,
    ``queries`` and the Table 4 quantities, from every run folder whose referral table has a large
    tier (``share_large``), with prediction rule ``rule``."""
    from lightning_fed.reporting.edgedrm_tables import run_setting

    rows = []
    for run, config, table in referral_runs(root):
        if "share_large" not in table.columns:
            continue
        setting = run_setting(config)
        for r in table.filter(pl.col("prediction_rule") == rule).iter_rows(named=True):
            if r["router"] in TIER_CONDITIONS:
                rows.append(
                    {
                        "run": run.name,
                        "graph": setting["graph"],
                        "seed": setting["seed"],
                        "condition": TIER_CONDITIONS[r["router"]],
                        "queries": r.get("queries") or "test",
                        **{c: float(r[c]) * (100.0 if c == "accuracy" else 1.0) for c in _TIER_COLUMNS},
                    }
                )
    return pl.DataFrame(rows)


def tier_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample SD (``<column>_mean`` / ``<column>_sd``) per (graph, condition), with ``seeds``
    and the ``queries`` the runs used (joined when they differ)."""
    if rows.height == 0:
        return pl.DataFrame()
    stats = [pl.col(c).mean().alias(f"{c}_mean") for c in _TIER_COLUMNS]
    stats += [pl.col(c).std().alias(f"{c}_sd") for c in _TIER_COLUMNS]
    order = {name: k for k, name in enumerate(TIER_CONDITIONS.values())}
    return (
        rows.group_by("graph", "condition")
        .agg(
            *stats,
            pl.col("seed").n_unique().alias("seeds"),
            pl.col("queries").unique().sort().str.join(", ").alias("queries"),
        )
        .with_columns(pl.col("condition").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
        .sort("graph", "_order")
        .drop("_order")
    )


def tier_markdown(table: pl.DataFrame) -> str:
    """:func:`tier_table` in Table 4's layout (``Tiers-layered: EdgeDRM-NR`` rows, ``mean ± SD``)."""
    if table.height == 0:
        return ""

    def cell(r: dict, c: str) -> str:
        mean, sd, d = r[f"{c}_mean"], r[f"{c}_sd"], 3 if c == "peak_share" else 2  # 3.125 = 100 / 32
        return f"{mean:.{d}f}" if sd is None else f"{mean:.{d}f} ± {sd:.{d}f}"

    head = ["Condition", *_TIER_COLUMNS.values(), "Seeds", "Queries"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.iter_rows(named=True):
        values = [f"{r['graph']}: {r['condition']}", *(cell(r, c) for c in _TIER_COLUMNS)]
        lines.append("| " + " | ".join([*values, str(r["seeds"]), r["queries"]]) + " |")
    return "\n".join(lines) + "\n"
