"""Referral figures: gain per run and router, tier shares, and one run's routing picture.

- :func:`gain_plot`: accuracy of each router (weighted-history rule where it applies) per run, so
  the referral gain over EdgeDRM-NR reads off per topology (EdgeDRM Sec. 5.2: largest on sparse
  graphs, none on the complete graph).
- :func:`tier_share_plot`: the share of classifier calls landing on each tier per router (EdgeDRM
  App. D.1, Table 4 / Figure 3).

- :func:`routing_picture`: one run's graph with its referral traffic (``referral_traffic.png``,
  written by :func:`lightning_fed.referral.refer.refer`): clients on a circle (id order, tiers
  contiguous when ids are), coloured by tier; a node's area grows with its classifier calls ``C_i``
  (labelled), an edge's width with the moves along it; the legend marks the uniform load and the
  widest edge (:func:`routing_figure`).

The first two take polars tables as :func:`~lightning_fed.reporting.collect_referrals` returns them
(a ``run`` column, then the columns of :func:`~lightning_fed.referral.refer.refer`) and return the
matplotlib Figure, writing a PNG when given a path. Rows are picked by ``router_key`` (the router's
stable key, :attr:`lightning_fed.referral.routers.Router.key`) when the table has that column, else by
the ``router`` label, so a relabelled router is still drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from torch import Tensor

from lightning_fed.plots.canvas import new_figure, save_png

__all__ = ["DEFAULT_ROUTERS", "gain_plot", "routing_figure", "routing_picture", "tier_share_plot"]

#: The rows compared by default: EdgeDRM and its ablations, each with the weighted-history rule.
DEFAULT_ROUTERS = ("EdgeDRM-NR", "random", "count-only", "EdgeDRM w/o prior", "EdgeDRM")


def _key_column(table: pl.DataFrame) -> str:
    """``router_key`` when the table records the routers' stable keys, else ``router`` (older tables)."""
    return "router_key" if "router_key" in table.columns else "router"


def _pick(table: pl.DataFrame, rule: str, routers: Sequence[str]) -> pl.DataFrame:
    """The rows of prediction rule ``rule`` whose router (key, else label) is one of ``routers``."""
    if "run" not in table.columns:
        table = table.with_columns(pl.lit("run").alias("run"))
    by = _key_column(table)
    return table.filter((pl.col("prediction_rule") == rule) & pl.col(by).is_in(list(routers)))


def gain_plot(
    table: pl.DataFrame,
    path: str | Path | None = None,
    routers: Sequence[str] = DEFAULT_ROUTERS,
    rule: str = "weighted history",
) -> Figure:
    """Grouped bars: accuracy per run (x) and router (colour), one prediction rule."""
    rows = _pick(table, rule, routers)
    if rows.height == 0:
        raise ValueError(f"no rows with prediction_rule={rule!r} and routers {list(routers)} in the table")
    runs = list(dict.fromkeys(rows["run"].to_list()))
    by = _key_column(rows)
    present = [r for r in routers if r in set(rows[by])]
    fig = new_figure(1.6 + 1.4 * len(runs), 3.6)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(present)
    for k, router in enumerate(present):
        acc = [
            rows.filter((pl.col("run") == run) & (pl.col(by) == router))["accuracy"].mean() or 0.0
            for run in runs
        ]
        ax.bar([i + (k - (len(present) - 1) / 2) * width for i in range(len(runs))], acc, width, label=router)
    ax.set_xticks(range(len(runs)), runs, rotation=15, ha="right")
    ax.set_ylabel(f"accuracy ({rule})")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if path is not None:
        save_png(fig, path)
    return fig


def tier_share_plot(
    table: pl.DataFrame,
    path: str | Path | None = None,
    routers: Sequence[str] = ("EdgeDRM-NR", "EdgeDRM w/o prior", "EdgeDRM"),
    rule: str = "weighted history",
) -> Figure:
    """Stacked bars of the share of calls per tier, per (run, router)."""
    rows = _pick(table, rule, routers)
    tiers = [c.removeprefix("share_") for c in rows.columns if c.startswith("share_")]
    if rows.height == 0 or not tiers:
        raise ValueError("no tier share columns (share_<tier>) for those routers in the table")
    labels = [f"{run}\n{router}" for run, router in zip(rows["run"], rows["router"], strict=True)]
    fig = new_figure(1.2 + 1.1 * len(labels), 3.8)
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
        save_png(fig, path)
    return fig


_TIER_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def routing_figure(
    adjacency: Tensor,
    calls: Tensor,
    traffic: Tensor,
    tiers: Sequence[str] | None = None,
    title: str = "",
) -> Figure:
    """The figure of :func:`routing_picture`: clients on a circle, each labelled ``id: calls``, its
    area growing with its calls; an edge's width with the moves along it. The legend gives the
    tiers, a hollow marker at the uniform load (total calls / clients: what every client would
    serve if the load were even) and the widest edge's moves."""
    c = int(adjacency.shape[0])
    pos = [(math.cos(2 * math.pi * i / c), math.sin(2 * math.pi * i / c)) for i in range(c)]
    names = list(tiers) if tiers is not None else ["client"] * c
    palette = {g: _TIER_COLORS[k % len(_TIER_COLORS)] for k, g in enumerate(dict.fromkeys(names))}
    fig = new_figure(6.5, 6.5)
    ax = fig.add_subplot(1, 1, 1)
    top_edge = max(float(traffic.max()), 1.0)
    for i in range(c):
        for j in range(i + 1, c):
            if bool(adjacency[i, j]):
                w = 0.4 + 5.0 * float(traffic[i, j]) / top_edge
                ax.plot(*zip(pos[i], pos[j], strict=True), color="0.6", lw=w, zorder=1)
    top = max(float(calls.max()), 1.0)

    def area(value: float) -> float:
        return 40 + 900 * value / top

    for g, colour in palette.items():
        idx = [i for i in range(c) if names[i] == g]
        ax.scatter(
            [pos[i][0] for i in idx],
            [pos[i][1] for i in idx],
            s=[area(float(calls[i])) for i in idx],
            color=colour,
            edgecolor="black",
            zorder=2,
        )
    for i in range(c):  # labels just outside the circle, away from the node markers
        x, y = pos[i]
        ax.text(1.16 * x, 1.16 * y, f"{i}: {int(calls[i])}", fontsize=7, ha="center", va="center")
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    handles = []
    if tiers is not None:  # fixed-size tier markers (the node areas encode traffic)
        handles += [
            Line2D([], [], marker="o", ls="", color=col, markeredgecolor="black", label=g)
            for g, col in palette.items()
        ]
    uniform = float(calls.sum()) / max(c, 1)
    handles.append(
        Line2D(
            [],
            [],
            marker="o",
            ls="",
            markerfacecolor="none",
            markeredgecolor="black",
            markersize=math.sqrt(area(uniform)),
            label=f"uniform load: {uniform:.0f} calls per client",
        )
    )
    handles.append(Line2D([], [], color="0.6", lw=5.4, label=f"widest edge: {int(traffic.max())} moves"))
    ax.legend(handles=handles, loc="upper right", fontsize=7, labelspacing=1.2, borderpad=0.8)
    ax.set_title(title or "referral traffic", fontsize=10)
    ax.text(
        0.0,
        -1.3,
        "label: client id: classifier calls; node area: calls; edge width: moves along the edge",
        fontsize=7,
        ha="center",
    )
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def routing_picture(
    adjacency: Tensor,
    calls: Tensor,
    traffic: Tensor,
    path: str | Path,
    tiers: Sequence[str] | None = None,
    title: str = "",
) -> Path:
    """Draw :func:`routing_figure` and save it as a PNG (atomically).

    Args:
        adjacency: Bool ``[C, C]``.
        calls: Calls per client ``[C]``.
        traffic: Moves per undirected edge ``[C, C]`` (symmetric).
        path: Output PNG.
        tiers: Tier name per client (colour); None colours every client alike.
        title: Figure title.
    """
    return save_png(routing_figure(adjacency, calls, traffic, tiers, title), path)
