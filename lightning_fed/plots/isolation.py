"""Per-round isolation plot (``isolation.png``): the share of centers that exchanged nothing, per method."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.plots.canvas import new_figure, save_png

__all__ = ["isolation_plot"]


def isolation_plot(series: pl.DataFrame, path: str | Path) -> Path:
    """Per-round isolation rate, one line per method.

    Lines are the mean over a method's seeds at each round (a band spans min-max with several seeds;
    runs that stopped early contribute up to their last round).

    Args:
        series: ``round``, ``isolation_rate``, ``method`` (one row per run and round, as
            :func:`lightning_fed.reporting.isolation_series` reads them).
        path: PNG destination (written atomically).

    Returns:
        ``path``.

    Raises:
        ValueError: If ``series`` has no rows.
    """
    if not series.height:
        raise ValueError("isolation_plot: no run has isolation_rate in rounds.parquet")
    agg = (
        series.group_by("method", "round")
        .agg(
            pl.col("isolation_rate").mean().alias("mean"),
            pl.col("isolation_rate").min().alias("lo"),
            pl.col("isolation_rate").max().alias("hi"),
            pl.len().alias("n"),
        )
        .sort("method", "round")
    )
    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot()
    final = agg.group_by("method").agg(pl.col("mean").last()).sort("mean", descending=True)
    for method in final["method"]:
        m = agg.filter(pl.col("method") == method)
        rounds = m["round"].to_list()
        flat = float(m["hi"].max()) == 0.0  # overlapping lines at 0: say so in the legend
        label = f"{method} (0 % throughout)" if flat else method
        (line,) = ax.plot(rounds, (100 * m["mean"]).to_list(), lw=1.3, label=label)
        if int(m["n"].max()) > 1:
            ax.fill_between(
                rounds,
                (100 * m["lo"]).to_list(),
                (100 * m["hi"]).to_list(),
                color=line.get_color(),
                alpha=0.15,
            )
    ax.set_xlabel("round")
    # metrics/isolation.py: no bytes sent or received (ABPS: resting, no partner)
    ax.set_ylabel("isolation rate (% of centers that exchanged nothing)")
    several = int(agg["n"].max()) > 1
    ax.set_title("Per-round isolation" + (" (mean over seeds, band: min-max)" if several else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_png(fig, path)
