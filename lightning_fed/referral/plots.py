"""Routing picture: the graph with referral traffic per client (PNG, Agg canvas, no pyplot).

Clients sit on a circle (id order, tiers contiguous when ids are), coloured by tier; a node's area
grows with its classifier calls ``C_i`` (labelled), an edge's width with the moves along it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from torch import Tensor

from lightning_fed.io import atomic_path

__all__ = ["routing_picture"]

_TIER_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def routing_picture(
    adjacency: Tensor,
    calls: Tensor,
    traffic: Tensor,
    path: str | Path,
    tiers: Sequence[str] | None = None,
    title: str = "",
) -> Path:
    """Draw the graph with traffic per node and per edge and save it as a PNG (atomically).

    Args:
        adjacency: Bool ``[C, C]``.
        calls: Calls per client ``[C]``.
        traffic: Moves per undirected edge ``[C, C]`` (symmetric).
        path: Output PNG.
        tiers: Tier name per client (colour); None colours every client alike.
        title: Figure title.
    """
    c = int(adjacency.shape[0])
    pos = [(math.cos(2 * math.pi * i / c), math.sin(2 * math.pi * i / c)) for i in range(c)]
    names = list(tiers) if tiers is not None else ["client"] * c
    palette = {g: _TIER_COLORS[k % len(_TIER_COLORS)] for k, g in enumerate(dict.fromkeys(names))}
    fig = Figure(figsize=(6.5, 6.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    top_edge = max(float(traffic.max()), 1.0)
    for i in range(c):
        for j in range(i + 1, c):
            if bool(adjacency[i, j]):
                w = 0.4 + 5.0 * float(traffic[i, j]) / top_edge
                ax.plot(*zip(pos[i], pos[j], strict=True), color="0.6", lw=w, zorder=1)
    top = max(float(calls.max()), 1.0)
    for g, colour in palette.items():
        idx = [i for i in range(c) if names[i] == g]
        ax.scatter(
            [pos[i][0] for i in idx],
            [pos[i][1] for i in idx],
            s=[40 + 900 * float(calls[i]) / top for i in idx],
            color=colour,
            edgecolor="black",
            zorder=2,
        )
    for i in range(c):  # labels just outside the circle, away from the node markers
        x, y = pos[i]
        ax.text(1.16 * x, 1.16 * y, f"{i}: {int(calls[i])}", fontsize=7, ha="center", va="center")
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    if tiers is not None:  # fixed-size legend markers (the node areas encode traffic)
        handles = [
            Line2D([], [], marker="o", ls="", color=col, markeredgecolor="black", label=g)
            for g, col in palette.items()
        ]
        ax.legend(handles=handles, loc="upper right", fontsize=8, title="tier")
    ax.set_title(title or "referral traffic (node area: calls; edge width: moves)", fontsize=10)
    ax.set_aspect("equal")
    ax.axis("off")
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    return path
