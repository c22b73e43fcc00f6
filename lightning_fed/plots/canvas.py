"""The figure canvas every plot of the package draws on: Agg, no ``pyplot``, no global backend switch."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lightning_fed.io import atomic_path

__all__ = ["new_figure", "save_png"]


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches attached to an Agg canvas (nothing is displayed)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as a 150-dpi PNG, atomically (a reader never sees half a file)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    return path
