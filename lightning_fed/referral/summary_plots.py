"""Plots over referral tables (``referral.csv`` of one or several runs): gain per graph, tier shares.

- :func:`gain_plot`: accuracy of each router (weighted-history rule where it applies) per run, so
  the referral gain over EdgeDRM-NR reads off per topology (EdgeDRM Sec. 5.2: largest on sparse
  graphs, none on the complete graph).
- :func:`tier_share_plot`: the share of classifier calls landing on each tier per router (EdgeDRM
  App. D.1, Table 4 / Figure 3).

Both take polars tables as :func:`~lightning_fed.reporting.collect_referrals` returns them (a
``run`` column, then the columns of :func:`~lightning_fed.referral.refer.refer`) and return the
matplotlib Figure, writing a PNG when given a path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lightning_fed.reporting.plots import _save

__all__ = ["gain_plot", "tier_share_plot"]

#: The rows compared by default: EdgeDRM and its ablations, each with the weighted-history rule.
DEFAULT_ROUTERS = ("EdgeDRM-NR", "random", "count-only", "EdgeDRM w/o prior", "EdgeDRM")


def _pick(table: pl.DataFrame, rule: str) -> pl.DataFrame:
    if "run" not in table.columns:
        table = table.with_columns(pl.lit("run").alias("run"))
    return table.filter(pl.col("prediction_rule") == rule)


def gain_plot(
    table: pl.DataFrame,
    path: str | Path | None = None,
    routers: Sequence[str] = DEFAULT_ROUTERS,
    rule: str = "weighted history",
) -> Figure:
    """Grouped bars: accuracy per run (x) and router (colour), one prediction rule."""
    rows = _pick(table, rule).filter(pl.col("router").is_in(list(routers)))
    if rows.height == 0:
        raise ValueError(f"no rows with prediction_rule={rule!r} and routers {list(routers)} in the table")
    runs = list(dict.fromkeys(rows["run"].to_list()))
    present = [r for r in routers if r in set(rows["router"])]
    fig = Figure(figsize=(1.6 + 1.4 * len(runs), 3.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(present)
    for k, router in enumerate(present):
        acc = [
            rows.filter((pl.col("run") == run) & (pl.col("router") == router))["accuracy"].mean() or 0.0
            for run in runs
        ]
        ax.bar([i + (k - (len(present) - 1) / 2) * width for i in range(len(runs))], acc, width, label=router)
    ax.set_xticks(range(len(runs)), runs, rotation=15, ha="right")
    ax.set_ylabel(f"accuracy ({rule})")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if path is not None:
        _save(fig, Path(path))
    return fig


def tier_share_plot(
    table: pl.DataFrame,
    path: str | Path | None = None,
    routers: Sequence[str] = ("EdgeDRM-NR", "EdgeDRM w/o prior", "EdgeDRM"),
    rule: str = "weighted history",
) -> Figure:
    """Stacked bars of the share of calls per tier, per (run, router)."""
    rows = _pick(table, rule).filter(pl.col("router").is_in(list(routers)))
    tiers = [c.removeprefix("share_") for c in rows.columns if c.startswith("share_")]
    if rows.height == 0 or not tiers:
        raise ValueError("no tier share columns (share_<tier>) for those routers in the table")
    labels = [f"{run}\n{router}" for run, router in zip(rows["run"], rows["router"], strict=True)]
    fig = Figure(figsize=(1.2 + 1.1 * len(labels), 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    bottom = [0.0] * rows.height
    for tier in tiers:
        share = [float(v) if v is not None else 0.0 for v in rows[f"share_{tier}"].to_list()]
        ax.bar(range(rows.height), share, 0.7, bottom=bottom, label=tier)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xticks(range(rows.height), labels, fontsize=7)
    ax.set_ylabel("share of classifier calls (%)")
    ax.set_ylim(0, 100)
    ax.legend(title="tier", fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if path is not None:
        _save(fig, Path(path))
    return fig
