"""Accuracy-bandwidth Pareto plot (``pareto.png``): mean test AUROC against bytes vs FedAvg.

Methods that send nothing (``bytes_vs_fedavg == 0``) cannot sit on the log x axis: they are drawn
with hollow markers at a floor a quarter of the smallest positive bandwidth (0.01 when there is
none), where the axis tick reads ``0`` (a thin vertical line separates them from the rest). Methods
that pool the data (``upper_bounds``: Centralized) are the upper bound, not federated competitors:
they are left out of the Pareto front. Labels that would overlap a marker or another label are
nudged upward with a thin leader line. The colour is the method's family
(:data:`FAMILY_COLORS`; the reporting layer decides the family, :mod:`lightning_fed.reporting.families`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from lightning_fed.plots.canvas import new_figure, save_png

__all__ = ["FAMILY_COLORS", "pareto_front", "pareto_plot"]

#: Colour per method family.
FAMILY_COLORS: dict[str, str] = {
    "FedAvg-like (star)": "tab:blue",
    "ABPS": "tab:orange",
    "goal-aware ABPS": "tab:green",
    "decentralized (graph)": "tab:red",
    "no exchange": "tab:gray",
    "other": "tab:purple",
}


def pareto_front(x: list[float], y: list[float]) -> list[bool]:
    """Which points are Pareto-optimal for (low ``x`` = bytes, high ``y`` = AUROC).

    A point is on the front when no other point has ``x <= `` and ``y >=`` with one of them strict
    (identical points are both on it).

    Args:
        x: Bandwidth per point.
        y: Accuracy per point.

    Returns:
        One flag per point.
    """
    pts = list(zip(x, y, strict=True))
    return [not any(xj <= xi and yj >= yi and (xj < xi or yj > yi) for xj, yj in pts) for xi, yi in pts]


def _spread_labels(fig: Figure, texts: list, step: float = 2.0, max_steps: int = 60) -> None:
    """Nudge annotation texts upward (in offset points) until none overlaps a marker or an earlier label.

    A label that had to move keeps its thin leader line to the point; the others lose it.
    """
    renderer = fig.canvas.get_renderer()
    placed = []
    for t in texts:  # the markers themselves are obstacles too
        px, py = t.axes.transData.transform(t.xy)
        placed.append(Bbox.from_extents(px - 6, py - 6, px + 6, py + 6))
    for t in texts:
        start = t.xyann
        for _ in range(max_steps):
            box = Text.get_window_extent(t, renderer).expanded(1.0, 1.1)  # the text alone, no leader
            if not any(box.overlaps(b) for b in placed):
                break
            t.xyann = (t.xyann[0], t.xyann[1] + step)
        if t.arrow_patch is not None:
            t.arrow_patch.set_visible(t.xyann != start)
        placed.append(Text.get_window_extent(t, renderer))


def pareto_plot(
    table: pl.DataFrame,
    path: str | Path,
    centralized_auroc: float | None = None,
    families: Mapping[str, str] | None = None,
    upper_bounds: Collection[str] = (),
) -> Path:
    """Mean test AUROC against bytes vs FedAvg (log scale), one labelled point per method.

    Args:
        table: The output of :func:`lightning_fed.reporting.table1` (``method``, ``auroc_mean``,
            ``auroc_std``, ``bytes_vs_fedavg``).
        path: PNG destination (written atomically).
        centralized_auroc: The pooled upper bound, drawn as a dashed horizontal line when given.
        families: Method label -> family (a key of :data:`FAMILY_COLORS`, the colour); a label
            not in it is ``"other"``.
        upper_bounds: Method labels that pool the data (Centralized): drawn, but left out of the
            Pareto front (they are the upper bound, not a federated competitor).

    Returns:
        ``path``.
    """
    families = families or {}
    rows = [r for r in table.iter_rows(named=True) if r["auroc_mean"] is not None]
    positive = [r["bytes_vs_fedavg"] for r in rows if (r["bytes_vs_fedavg"] or 0) > 0]
    floor = min(positive) / 4 if positive else 0.01
    xs = [max(r["bytes_vs_fedavg"] or 0.0, 0.0) for r in rows]
    ys = [r["auroc_mean"] for r in rows]
    shown = [x if x > 0 else floor for x in xs]

    fig = new_figure(9.0, 5.0)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    seen: set[str] = set()
    texts = []
    for r, x, y in sorted(zip(rows, shown, ys, strict=True), key=lambda t: t[2]):
        family = families.get(r["method"], "other")
        color = FAMILY_COLORS[family]
        zero = (r["bytes_vs_fedavg"] or 0) <= 0
        ax.errorbar(
            x,
            y,
            yerr=r["auroc_std"] or 0.0,
            fmt="o",
            ms=7,
            capsize=3,
            color=color,
            mfc="white" if zero else color,
            label=None if family in seen else family,
            zorder=3,
        )
        seen.add(family)
        texts.append(
            ax.annotate(
                r["method"],
                (x, y),
                xytext=(6, -3),
                textcoords="offset points",
                fontsize=7.5,
                arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "gray", "shrinkA": 0, "shrinkB": 4},
            )
        )

    competitors = [i for i, r in enumerate(rows) if r["method"] not in upper_bounds]
    on_front = pareto_front([xs[i] for i in competitors], [ys[i] for i in competitors])
    front = sorted((shown[i], ys[i]) for i, keep in zip(competitors, on_front, strict=True) if keep)
    if front:
        fx, fy = zip(*front, strict=True)
        ax.plot(fx, fy, drawstyle="steps-post", color="black", lw=1.0, alpha=0.6, label="Pareto front")
    if centralized_auroc is not None:
        ax.axhline(centralized_auroc, ls="--", color="tab:red", lw=1.0, label="centralized (upper bound)")

    if any(x <= 0 for x in xs):
        ax.axvline(floor * 1.6, color="lightgray", lw=0.8, zorder=0)
        ticks = [t for t in ax.get_xticks() if t > floor * 1.6]
        ax.set_xticks([floor, *ticks], ["0", *[f"{t:g}" for t in ticks]])
    lo, hi = min(shown), max(shown)
    ax.set_xlim(lo / 1.6, hi * 2.5)
    ax.set_xlabel("bytes vs FedAvg (log scale; 0 = no exchange)")
    ax.set_ylabel("mean test AUROC across centers (± std over seeds)")
    ax.set_title("Accuracy vs bandwidth")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.canvas.draw()
    _spread_labels(fig, texts)
    return save_png(fig, path)
