"""The EdgeDRM task-weight sweep as a figure (``lambda_table.png``, EdgeDRM App. D.2.3, Table 5)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from lightning_fed.plots.canvas import new_figure, save_png

__all__ = ["lambda_plot"]


def lambda_plot(table: pl.DataFrame, path: str | Path | None = None) -> Figure:
    """Table 5 as a figure: per setting (a line style each), EdgeDRM and EdgeDRM-NR accuracy (mean ± SD
    over seeds) against ``lambda``; calls per query; the % of EdgeDRM walks reaching the source.

    Args:
        table: :func:`lightning_fed.reporting.tables.lambda_sweep.lambda_table` (per setting and
            ``lam``: ``<c>_mean`` / ``<c>_sd`` of ``edgedrm``, ``nr``, ``calls``, ``reached``).
        path: PNG destination (written atomically) or None.

    Returns:
        The figure.

    Raises:
        ValueError: If ``table`` has no rows.
    """
    if table.height == 0:
        raise ValueError("lambda_plot: the lambda table has no rows (no EdgeDRM run with a referral.csv)")
    fig = new_figure(11.0, 3.4)
    acc, calls, reached = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    styles = ("-", "--", ":", "-.")
    for k, (key, part) in enumerate(
        table.group_by(["dataset", "partition", "clients", "graph"], maintain_order=True)
    ):
        part = part.sort("lam")
        tag, ls, lam = f"{key[1]}, {key[2]} clients, {key[3]}", styles[k % len(styles)], part["lam"].to_list()
        for column, label, colour in (("edgedrm", "EdgeDRM", "C0"), ("nr", "EdgeDRM-NR", "C1")):
            sd = part[f"{column}_sd"].fill_null(0.0).to_list()
            acc.errorbar(
                lam,
                part[f"{column}_mean"].to_list(),
                yerr=sd,
                ls=ls,
                color=colour,
                marker="o",
                ms=3,
                capsize=2,
                label=f"{label} ({tag})",
            )
        calls.plot(lam, part["calls_mean"].to_list(), ls=ls, color="C0", marker="o", ms=3, label=tag)
        if part["reached_mean"].drop_nulls().len():
            reached.plot(lam, part["reached_mean"].to_list(), ls=ls, color="C2", marker="o", ms=3, label=tag)
    acc.set(xlabel="lambda", ylabel="accuracy (%)", title="accuracy (mean ± SD)")
    calls.set(xlabel="lambda", ylabel="classifier calls / query", title="EdgeDRM calls")
    reached.set(xlabel="lambda", ylabel="walks reaching the source (%)", title="EdgeDRM reaches the source")
    for ax in (acc, calls, reached):
        ax.grid(alpha=0.3)
    acc.legend(fontsize=6)
    fig.tight_layout()
    if path is not None:
        save_png(fig, path)
    return fig
