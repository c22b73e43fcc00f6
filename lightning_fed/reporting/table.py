"""Collect run directories and aggregate them into the ABPS paper's Table 1 (Sec. 6.3-6.4).

A run directory is any folder holding a ``summary.json`` (written by ``lightning-fed fit``). Runs
are grouped by the *method label* and seed their summary records (``label``: ``output.label``,
by default the stems of the run's ``--config`` files, e.g. ``abps_x``; a sweep records its cell
name), never by their folder names, so folders named in any way (a W&B agent's, ``M-s0``,
``M-s1``...) group correctly. Only summaries written before labels were recorded fall back to the
folder name: a trailing seed suffix is removed, so ``abps_x-seed3``, ``abps_x_seed3`` and
``abps-seed0-20261129-141200`` give ``abps_x``, ``abps_x`` and ``abps``; a directory named only
``seed<N>`` (layout ``root/<label>/seed<N>/``) takes its parent's name; when no name is left the
label is ``summary["method"]`` lower-cased.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl

from lightning_fed.io import atomic_path

__all__ = ["collect_runs", "method_label", "read_summary", "table1", "to_markdown", "write_table"]

_SEED_SUFFIX = re.compile(r"(?:^|[-_])seed\d+(?:-[\d-]+)?$")

_RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "method": pl.String(),
    "seed": pl.Int64(),
    "test_auroc_mean": pl.Float64(),
    "bytes_vs_fedavg": pl.Float64(),
    "isolation_rate": pl.Float64(),
    "mean_partners": pl.Float64(),
    "rounds": pl.Int64(),
    "wall_seconds": pl.Float64(),
    "total_bytes": pl.Int64(),
    "path": pl.String(),
}


def method_label(run_dir: Path, summary: dict, root: Path | None = None) -> str:
    """Method label of a run: ``summary["label"]``; for older summaries without one, the directory
    name without a trailing seed suffix (module docstring).

    Args:
        run_dir: The run directory.
        summary: Its parsed ``summary.json`` (``method`` is the fallback).
        root: The collection root; a ``seed<N>`` directory directly under it falls back to the method.

    Returns:
        The label, e.g. ``"abps_x"`` for ``abps_x-seed2-20261129-141200``.
    """
    if summary.get("label"):
        return str(summary["label"])
    label = _SEED_SUFFIX.sub("", run_dir.name)
    if not label and run_dir.parent != root and run_dir.parent != run_dir:
        label = _SEED_SUFFIX.sub("", run_dir.parent.name)
    return label or str(summary.get("method", "unknown")).lower()


def read_summary(path: Path) -> dict:
    """A run's parsed ``summary.json``.

    Raises:
        ValueError: One line naming the file when it is unreadable or not a JSON object (a report
            over a folder with one broken run says which one, rather than failing somewhere inside).
    """
    try:
        summary = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable summary ({err}); rerun or remove that run folder") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: not a summary (a JSON object expected); rerun or remove that run folder")
    return summary


def _number(value: object) -> float | None:
    return None if value is None else float(value)


def collect_runs(root: Path) -> pl.DataFrame:
    """One row per run directory found (recursively) under ``root``.

    Args:
        root: A folder of run directories (any depth; a run directory is one with ``summary.json``).

    Returns:
        Columns ``run`` (directory name), ``method`` (label, see the module docstring), ``seed``,
        ``test_auroc_mean``, ``bytes_vs_fedavg``, ``isolation_rate`` and ``mean_partners`` (null when
        the summary has none, e.g. FedAvg), ``rounds``, ``wall_seconds``, ``total_bytes``, ``path``;
        sorted by method, seed and run.

    Raises:
        ValueError: If ``root`` is not a directory or holds no run directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"runs root {root} is not a directory")
    rows = []
    for summary_path in sorted(root.rglob("summary.json")):
        run_dir = summary_path.parent
        summary = read_summary(summary_path)
        rows.append(
            {
                "run": run_dir.name,
                "method": method_label(run_dir, summary, root),
                "seed": summary.get("seed"),
                "test_auroc_mean": _number(summary.get("test_auroc_mean")),
                "bytes_vs_fedavg": _number(summary.get("bytes_vs_fedavg")),
                "isolation_rate": _number(summary.get("isolation_rate")),
                "mean_partners": _number(summary.get("mean_partners")),
                "rounds": summary.get("rounds"),
                "wall_seconds": _number(summary.get("wall_seconds")),
                "total_bytes": summary.get("total_bytes"),
                "path": str(run_dir),
            }
        )
    if not rows:
        raise ValueError(f"no run directories (folders with summary.json) under {root}")
    runs = pl.DataFrame(rows, schema=_RUN_SCHEMA).sort("method", "seed", "run")
    twice = runs.filter(pl.struct("method", "seed").is_duplicated())
    if twice.height:
        first = twice.row(0, named=True)
        same = twice.filter((pl.col("method") == first["method"]) & (pl.col("seed") == first["seed"]))
        raise ValueError(
            f"runs {', '.join(same['path'])} are all method {first['method']!r} with seed {first['seed']}: "
            "a table counts each seed once, so remove the extra runs or report them separately"
        )
    return runs


def table1(runs: pl.DataFrame) -> pl.DataFrame:
    """Aggregate runs per method label, Table 1 style.

    Args:
        runs: The output of :func:`collect_runs`.

    Returns:
        One row per method: ``auroc_mean`` (mean over seeds of the per-run mean test AUROC),
        ``auroc_std`` (sample std over seeds, ddof=1; null with one seed), ``n_seeds``, and the means
        over seeds of ``bytes_vs_fedavg``, ``isolation_rate``, ``mean_partners`` (E|P_i|), ``rounds``
        and ``wall_seconds`` (nulls ignored; null when no run of the method has the value). Sorted by
        ``auroc_mean`` descending (ties by method).
    """
    return (
        runs.group_by("method")
        .agg(
            pl.col("test_auroc_mean").mean().alias("auroc_mean"),
            pl.col("test_auroc_mean").std(ddof=1).alias("auroc_std"),
            pl.len().cast(pl.Int64).alias("n_seeds"),
            pl.col("bytes_vs_fedavg").mean(),
            pl.col("isolation_rate").mean(),
            pl.col("mean_partners").mean(),
            pl.col("rounds").mean(),
            pl.col("wall_seconds").mean(),
        )
        .sort(["auroc_mean", "method"], descending=[True, False], nulls_last=True)
    )


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def to_markdown(table: pl.DataFrame) -> str:
    """Render :func:`table1`'s output as a markdown table.

    Cells: AUROC ``0.823 ± 0.010`` (std over seeds; no ``±`` with one seed), bandwidth ``1.50x``,
    isolation ``2.2 %``, E|P_i| ``0.98``, rounds ``50``, wall ``33`` seconds; ``-`` where undefined.
    """
    lines = [
        "| method | test AUROC | seeds | bytes vs FedAvg | isolation | E\\|P_i\\| | rounds | wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.iter_rows(named=True):
        auroc = _fmt(r["auroc_mean"], ".3f")
        if r["auroc_std"] is not None and auroc != "-":
            auroc += f" ± {r['auroc_std']:.3f}"
        iso = None if r["isolation_rate"] is None else 100 * r["isolation_rate"]
        cells = [
            r["method"],
            auroc,
            str(r["n_seeds"]),
            _fmt(r["bytes_vs_fedavg"], ".2f", "x"),
            _fmt(iso, ".1f", " %"),
            _fmt(r["mean_partners"], ".2f"),
            _fmt(r["rounds"], ".0f"),
            _fmt(r["wall_seconds"], ".0f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(df: pl.DataFrame, path_stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.md`` (see :func:`to_markdown`) and ``<stem>.csv`` (raw numbers), atomically.

    Args:
        df: The output of :func:`table1`.
        path_stem: Destination without suffix, e.g. ``runs/report/table1``.

    Returns:
        The markdown and CSV paths.
    """
    stem = Path(path_stem)
    md, csv = stem.with_name(stem.name + ".md"), stem.with_name(stem.name + ".csv")
    with atomic_path(md) as tmp:
        tmp.write_text(to_markdown(df))
    with atomic_path(csv) as tmp:
        df.write_csv(tmp)
    return md, csv
