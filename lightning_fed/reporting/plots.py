"""Accuracy-bandwidth Pareto plot and per-round isolation plot (PNG, Agg canvas, no display).

Figures are drawn on matplotlib's Agg canvas directly (no ``pyplot``, no global backend switch).

Method families (colour), decided on the lower-cased method label, first match wins:

- ``no exchange``: contains ``local`` or ``central`` (Local-only, Centralized);
- ``goal-aware ABPS``: contains ``goal``;
- ``ABPS``: contains ``abps``;
- ``FedAvg-like (star)``: contains ``fedavg``, ``fedprox``, ``feddyn``, ``moon``, ``bnn``,
  ``scaffold`` or ``star``;
- ``decentralized (graph)``: contains ``decefl``, ``defta``, ``wpfed`` or ``dfedavgm``;
- ``other``: anything else.

Methods that send nothing (``bytes_vs_fedavg == 0``) cannot sit on the log x axis: they are drawn
with hollow markers at a floor a quarter of the smallest positive bandwidth (0.01 when there is
none), where the axis tick reads ``0`` (a thin vertical line separates them from the rest).
Centralized (label containing ``central``) pools the data and is the upper bound, not a federated
competitor: it is left out of the Pareto front. Labels that would overlap a marker or another label
are nudged upward with a thin leader line.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from lightning_fed.io import atomic_path
from lightning_fed.reporting.table import method_label, read_summary

__all__ = [
    "FAMILY_COLORS",
    "isolation_plot",
    "isolation_series",
    "method_family",
    "pareto_front",
    "pareto_plot",
]

FAMILY_COLORS: dict[str, str] = {
    "FedAvg-like (star)": "tab:blue",
    "ABPS": "tab:orange",
    "goal-aware ABPS": "tab:green",
    "decentralized (graph)": "tab:red",
    "no exchange": "tab:gray",
    "other": "tab:purple",
}


def method_family(label: str) -> str:
    """Family of a method label (see the module docstring), a key of :data:`FAMILY_COLORS`."""
    s = label.lower()
    if "local" in s or "central" in s:
        return "no exchange"
    if "goal" in s:
        return "goal-aware ABPS"
    if "abps" in s:
        return "ABPS"
    if any(k in s for k in ("fedavg", "fedprox", "feddyn", "moon", "bnn", "scaffold", "star")):
        return "FedAvg-like (star)"
    if any(k in s for k in ("decefl", "defta", "wpfed", "dfedavgm")):
        return "decentralized (graph)"
    return "other"


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


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    return path


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


def pareto_plot(table: pl.DataFrame, path: Path, centralized_auroc: float | None = None) -> Path:
    """Mean test AUROC against bytes vs FedAvg (log scale), one labelled point per method.

    Args:
        table: The output of :func:`lightning_fed.reporting.table1` (``method``, ``auroc_mean``,
            ``auroc_std``, ``bytes_vs_fedavg``).
        path: PNG destination (written atomically).
        centralized_auroc: The pooled upper bound, drawn as a dashed horizontal line when given.

    Returns:
        ``path``.
    """
    rows = [r for r in table.iter_rows(named=True) if r["auroc_mean"] is not None]
    positive = [r["bytes_vs_fedavg"] for r in rows if (r["bytes_vs_fedavg"] or 0) > 0]
    floor = min(positive) / 4 if positive else 0.01
    xs = [max(r["bytes_vs_fedavg"] or 0.0, 0.0) for r in rows]
    ys = [r["auroc_mean"] for r in rows]
    shown = [x if x > 0 else floor for x in xs]

    fig = Figure(figsize=(9.0, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    seen: set[str] = set()
    texts = []
    for r, x, y in sorted(zip(rows, shown, ys, strict=True), key=lambda t: t[2]):
        family = method_family(r["method"])
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

    competitors = [i for i, r in enumerate(rows) if "central" not in r["method"].lower()]
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
    return _save(fig, path)


def isolation_series(runs_root: Path) -> pl.DataFrame:
    """Per-round isolation rate of every run under ``runs_root`` whose ``rounds.parquet`` has it.

    Args:
        runs_root: A folder of run directories (searched recursively).

    Returns:
        Columns ``round``, ``isolation_rate`` (one value per round), ``method`` (label), ``path``;
        empty when no run has the column.
    """
    frames = []
    for summary_path in sorted(Path(runs_root).rglob("summary.json")):
        run_dir = summary_path.parent
        parquet = run_dir / "rounds.parquet"
        if not parquet.exists():
            continue
        if "isolation_rate" not in pl.read_parquet_schema(parquet):
            continue
        label = method_label(run_dir, read_summary(summary_path), Path(runs_root))
        per_round = (
            pl.read_parquet(parquet, columns=["round", "isolation_rate"])
            .group_by("round")
            .agg(pl.col("isolation_rate").first())
            .drop_nulls()
            .with_columns(pl.lit(label).alias("method"), pl.lit(str(run_dir)).alias("path"))
        )
        if per_round.height:
            frames.append(per_round)
    if not frames:
        return pl.DataFrame(
            schema={"round": pl.Int64, "isolation_rate": pl.Float64, "method": pl.String, "path": pl.String}
        )
    return pl.concat(frames, how="vertical_relaxed")


def isolation_plot(runs_root: Path, path: Path) -> Path:
    """Per-round isolation rate of every run whose ``rounds.parquet`` has the column, one line per method.

    Lines are the mean over a method's seeds at each round (a band spans min-max with several seeds;
    runs that stopped early contribute up to their last round).

    Args:
        runs_root: A folder of run directories (searched recursively).
        path: PNG destination (written atomically).

    Returns:
        ``path``.

    Raises:
        ValueError: If no run has per-round isolation data.
    """
    series = isolation_series(runs_root)
    if not series.height:
        raise ValueError(f"no run under {runs_root} has isolation_rate in rounds.parquet")
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
    fig = Figure(figsize=(7.5, 4.5))
    FigureCanvasAgg(fig)
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
    return _save(fig, path)
