"""Plots of partner selection over rounds (from :class:`~lightning_fed.callbacks.PartnerHistory`).

- :func:`posterior_plot`: heat maps of the posterior means ``E[phi_ij]`` (ABPS Sec. 4.2) at a few
  rounds, centers in order, the diagonal masked (a center never rates itself).
- :func:`partner_graph_plot`: the partner graph (who exchanged with whom) at a few rounds on a
  fixed circular layout; resting centers are drawn hollow.
- :func:`isolation_curve`: the share of resting centers per round.

Each returns the matplotlib Figure (shown inline in notebooks) and writes a PNG when given a path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from lightning_fed.plots.canvas import new_figure, save_png

__all__ = ["isolation_curve", "partner_graph_plot", "pick_rounds", "posterior_plot"]


def pick_rounds(history: dict[str, Any], count: int = 3) -> list[int]:
    """``count`` recorded positions spread from the first to the last round (indices into the history)."""
    n = len(history["rounds"])
    if n == 0:
        raise ValueError("the history is empty: run at least one round with PartnerHistory")
    return sorted({round(k * (n - 1) / max(1, count - 1)) for k in range(count)})


def _figure(panels: int, size: float = 3.4) -> tuple[Figure, list[Any]]:
    fig = new_figure(size * panels, size)
    return fig, [fig.add_subplot(1, panels, k + 1) for k in range(panels)]


def posterior_plot(
    history: dict[str, Any], path: str | Path | None = None, positions: Sequence[int] | None = None
) -> Figure:
    """Posterior-mean heat maps ``[C, C]`` (row i: what center i believes about peer j)."""
    if not history["means"]:
        raise ValueError("the history has no posterior means (PartnerHistory(posterior=True) with ABPS)")
    positions = list(positions) if positions is not None else pick_rounds(history)
    fig, axes = _figure(len(positions))
    image = None
    for ax, k in zip(axes, positions, strict=True):
        mean = history["means"][k].clone()
        mean.fill_diagonal_(float("nan"))
        image = ax.imshow(mean.numpy(), vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
        ax.set_title(f"round {history['rounds'][k] + 1}")
        ax.set_xlabel("peer j")
        ax.set_ylabel("center i")
    fig.colorbar(image, ax=axes, shrink=0.8, label="posterior mean E[phi_ij]")
    if path is not None:
        save_png(fig, path)
    return fig


def partner_graph_plot(
    history: dict[str, Any],
    num_centers: int,
    path: str | Path | None = None,
    positions: Sequence[int] | None = None,
) -> Figure:
    """Partner graphs at a few rounds on a circular layout (hollow nodes rested that round)."""
    positions = list(positions) if positions is not None else pick_rounds(history)
    angle = torch.arange(num_centers, dtype=torch.float64) * (2 * math.pi / max(1, num_centers))
    xy = torch.stack([angle.cos(), angle.sin()], 1).numpy()
    fig, axes = _figure(len(positions))
    for ax, k in zip(axes, positions, strict=True):
        edges = history["edges"][k]
        for i, j in edges.tolist():
            ax.plot([xy[i, 0], xy[j, 0]], [xy[i, 1], xy[j, 1]], color="tab:orange", lw=0.8, alpha=0.7)
        engaged = torch.zeros(num_centers, dtype=torch.bool)
        engaged[edges.reshape(-1)] = True
        ax.scatter(xy[engaged.numpy(), 0], xy[engaged.numpy(), 1], s=18, color="tab:blue", zorder=3)
        ax.scatter(
            xy[~engaged.numpy(), 0],
            xy[~engaged.numpy(), 1],
            s=18,
            facecolors="none",
            edgecolors="tab:gray",
            zorder=3,
        )
        ax.set_title(f"round {history['rounds'][k] + 1}: {len(edges)} partnerships")
        ax.set_aspect("equal")
        ax.axis("off")
    if path is not None:
        save_png(fig, path)
    return fig


def isolation_curve(history: dict[str, Any], path: str | Path | None = None) -> Figure:
    """Share of centers that rested (exchanged nothing), per round."""
    fig, (ax,) = _figure(1, size=4.0)
    ax.plot([r + 1 for r in history["rounds"]], history["isolation"], marker="o", ms=3)
    ax.set_xlabel("round")
    ax.set_ylabel("isolation rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if path is not None:
        save_png(fig, path)
    return fig
