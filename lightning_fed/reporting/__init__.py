"""Reports over run directories: one walk of the run tree, then every table spec that has rows.

``report(root)`` is what ``lightning-fed report RUNS_DIR`` runs: :func:`~.runs.read_runs` reads each
run folder once into a frozen :class:`~.runs.RunRecord`; every table of :func:`~.tables.specs`
(one module per paper table under :mod:`lightning_fed.reporting.tables`) is written when it has
rows; the figures are drawn by :mod:`lightning_fed.plots`. The names below are the public surface
notebooks and scripts import.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.reporting.families import is_upper_bound, run_family
from lightning_fed.reporting.folds import pool_folds
from lightning_fed.reporting.runs import RunRecord, as_records, method_label, read_runs, read_summary
from lightning_fed.reporting.tables import specs
from lightning_fed.reporting.tables.diagnostics import (
    diagnostics_markdown,
    has_selection_diagnostics,
    write_diagnostics,
)
from lightning_fed.reporting.tables.edgedrm import edgedrm_rows
from lightning_fed.reporting.tables.table1 import (
    check_reference,
    collect_runs,
    runs_frame,
    table1,
    to_markdown,
    write_runs,
    write_table,
)

__all__ = [
    "FAMILY_COLORS",
    "RunRecord",
    "collect_referrals",
    "collect_runs",
    "diagnostics_markdown",
    "isolation_curve",
    "isolation_plot",
    "isolation_series",
    "method_label",
    "pareto_front",
    "pareto_plot",
    "partner_graph_plot",
    "posterior_plot",
    "read_runs",
    "read_summary",
    "report",
    "table1",
    "to_markdown",
    "write_diagnostics",
    "write_runs",
    "write_table",
]

#: Figure names served lazily from :mod:`lightning_fed.plots` (importing reporting loads no matplotlib).
_PLOTS = {
    "FAMILY_COLORS": "pareto",
    "pareto_front": "pareto",
    "pareto_plot": "pareto",
    "isolation_curve": "partners",
    "partner_graph_plot": "partners",
    "posterior_plot": "partners",
}


def __getattr__(name: str) -> object:
    if name in _PLOTS:
        import importlib

        return getattr(importlib.import_module(f"lightning_fed.plots.{_PLOTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def collect_referrals(source: Path | str | list[RunRecord]) -> pl.DataFrame:
    """Every run's ``referral.csv`` (a run folder's, never a report folder's) in one frame, with a
    leading ``run`` column (the folder name); empty without any."""
    frames = [
        r.referral.select(pl.lit(r.name).alias("run"), pl.all())
        for r in as_records(source)
        if r.referral is not None
    ]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def isolation_series(source: Path | str | list[RunRecord]) -> pl.DataFrame:
    """Per-round isolation rate of every run whose ``rounds.parquet`` has it.

    Returns:
        Columns ``round``, ``isolation_rate`` (one value per round), ``method`` (label), ``path``;
        empty when no run has the column.
    """
    frames = []
    for record in as_records(source):
        if not record.rounds_have("isolation_rate"):
            continue
        per_round = (
            record.rounds.select("round", "isolation_rate")
            .group_by("round")
            .agg(pl.col("isolation_rate").first())
            .drop_nulls()
            .with_columns(pl.lit(record.label).alias("method"), pl.lit(str(record.path)).alias("path"))
        )
        if per_round.height:
            frames.append(per_round)
    if not frames:
        return pl.DataFrame(
            schema={"round": pl.Int64, "isolation_rate": pl.Float64, "method": pl.String, "path": pl.String}
        )
    return pl.concat(frames, how="vertical_relaxed")


def isolation_plot(source: Path | str | list[RunRecord], path: Path) -> Path:
    """``isolation.png`` of the runs: :func:`lightning_fed.plots.isolation.isolation_plot` of
    :func:`isolation_series`."""
    from lightning_fed.plots.isolation import isolation_plot as draw

    return draw(isolation_series(source), path)


def report(root: Path, out: Path | None = None, reference: str | None = None) -> dict[str, Path]:
    """Write Table 1, the diagnostics and runs tables, the Pareto plot and the isolation plot.

    The run tree is read once (:func:`read_runs`); the fold runs of a repeated evaluation
    (``data.split.folds``) are pooled per label and seed (:func:`~.folds.pool_folds`: each center's
    out-of-fold AUROC) and every table of :func:`~.tables.specs` with rows is
    written. The Pareto plot's dashed upper bound is the mean AUROC of the methods whose algorithm
    pools the data (Centralized, :data:`~.families.UPPER_BOUND_ALGORITHMS`; the best one if
    several) when the runs include one; colours are the declared families (:mod:`.families`).

    Args:
        root: A folder of run directories (searched recursively).
        out: Destination folder; ``root/report/`` by default.
        reference: Method label Table 1's paired differences (with 95 % CIs and a verdict) compare
            to; ``None``: ``fedavg`` when the runs have it, else none.

    Returns:
        The written files by name: ``table1.md`` (the main table: AUROC mean ± sample SD, seeds,
        bandwidth, isolation, E|P_i|, rounds, wall, paired difference [CI] and verdict),
        ``table1.csv`` (every column), ``diagnostics.md`` / ``diagnostics.csv`` (the partner-selection
        diagnostics; absent when no run records any), ``runs.csv`` (one row per run, every field
        read, e.g. ``restored_best``, ``best_round``; pooled fold runs as one), ``folds.csv`` (with
        fold runs only: one row per fold run, its own numbers), ``pareto.png`` (when a run has a test AUROC)
        and ``isolation.png``
        (absent when no run has per-round isolation data, or when isolation is 0 throughout and no
        run selects partners: fixed graphs, FedAvg), and, when any run has a referral table,
        ``referral.md`` / ``referral.csv`` (all of them) and ``referral_gain.png`` (accuracy per run
        and router); when any run has a referral table or is a FedDRM run (a root of FedDRM runs
        alone included: Table 2's centralized row run on its own), ``edgedrm_table.md`` (the
        EdgeDRM paper's Table 1 layout: graph x method rows,
        dataset x partition columns, mean +/- SD over seeds, best decentralized in bold, then
        EdgeDRM's margins per graph), ``edgedrm_settings.md`` (Table 2's layout: setting rows, method
        columns), ``edgedrm_paired.md`` (EdgeDRM minus DFedAvgM, EdgeDRM-NR, the strongest other
        decentralized method and FedDRM per graph and setting, paired over seeds, 95 % t interval and
        verdict), ``referral_reach.md`` (per graph, setting and ``lambda``, the share of test queries
        whose source is within L moves of the entry, and the share each router's walks reach it),
        ``edgedrm_checkpoints.md`` (per setting, graph and ``lambda``: the encoder gap between
        neighbours, the stage-II head shift and the potential norm, read from the checkpoints) and, with
        hospital tiers, ``referral_tiers.png`` (share of calls per tier) and
        ``tier_table.md`` (Table 4's layout, mean ± SD over seeds, one row per graph and condition, then
        the paired contrasts of :mod:`lightning_fed.reporting.tables.tiers`);
        with runs at several ``lambda``, ``lambda_table.md`` (Table 5's layout with the share of walks
        reaching the source, then each ``lambda`` against 0.9 paired by seed) and ``lambda_table.png``.

    Raises:
        ValueError: If ``root`` holds no run directory, or ``reference`` is not among its methods.
    """
    root = Path(root)
    out = Path(out) if out is not None else root / "report"
    found = read_runs(root)
    check_reference([r.label for r in found], reference)  # before any file is written
    records = pool_folds(found)  # data.split.folds: each label and seed's k fold runs as one
    runs = runs_frame(records)
    tables = specs(reference)
    written: dict[str, Path] = {}
    for spec in (s for s in tables if s.gate is None):
        written.update(spec.write(records, out))
    written["runs.csv"] = write_runs(runs, out / "runs.csv")
    fold_runs = [r for r in found if r.fold is not None]
    if fold_runs:
        written["folds.csv"] = write_runs(runs_frame(fold_runs), out / "folds.csv")
    written.update(_figures(records, runs, out, reference))
    referrals = collect_referrals(records)
    if referrals.height:
        from lightning_fed.plots.referral import gain_plot
        from lightning_fed.referral.refer import write_referral

        written["referral.csv"], written["referral.md"] = write_referral(referrals, out)
        gain_plot(referrals, out / "referral_gain.png")
        written["referral_gain.png"] = out / "referral_gain.png"
    # A root of FedDRM runs alone (no referral: the centralized reference of Table 2, run on its own)
    # still gets its EdgeDRM-layout rows.
    if edgedrm_rows(records).height:
        for spec in (s for s in tables if s.gate == "edgedrm"):
            written.update(spec.write(records, out))
    if any(c.startswith("share_") and c != "share_all" for c in referrals.columns):
        from lightning_fed.plots.referral import tier_share_plot

        tier_share_plot(referrals, out / "referral_tiers.png")
        written["referral_tiers.png"] = out / "referral_tiers.png"
        for spec in (s for s in tables if s.gate == "tiers"):
            written.update(spec.write(records, out))
    return written


def _figures(
    records: list[RunRecord], runs: pl.DataFrame, out: Path, reference: str | None
) -> dict[str, Path]:
    """``pareto.png`` (when a run has a test AUROC) and ``isolation.png`` (see :func:`report`)."""
    from lightning_fed.plots.pareto import pareto_plot

    written: dict[str, Path] = {}
    table = table1(runs, reference)
    families = {r.label: run_family(r) for r in records}
    bounds = {r.label for r in records if is_upper_bound(r)}
    central = table.filter(pl.col("method").is_in(sorted(bounds)))["auroc_mean"]
    bound = central.drop_nulls().max()
    if table["auroc_mean"].drop_nulls().len():  # nothing to place without an AUROC
        written["pareto.png"] = pareto_plot(
            table, out / "pareto.png", centralized_auroc=bound, families=families, upper_bounds=bounds
        )
    isolation = isolation_series(records)
    # Resting is a partner-selection outcome: on fixed graphs (gossip, EdgeDRM) and for FedAvg it is
    # 0 by construction, and a flat zero line is left out.
    if isolation.height and (has_selection_diagnostics(table) or isolation["isolation_rate"].max() > 0):
        from lightning_fed.plots.isolation import isolation_plot as draw

        written["isolation.png"] = draw(isolation, out / "isolation.png")
    return written
