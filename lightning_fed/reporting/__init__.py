"""Reports over run directories: Table 1 (markdown + CSV), the accuracy-bandwidth Pareto plot, isolation.

``report(root)`` is what ``lightning-fed report RUNS_DIR`` runs.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.reporting.abps_plots import isolation_curve, partner_graph_plot, posterior_plot
from lightning_fed.reporting.plots import (
    FAMILY_COLORS,
    isolation_plot,
    isolation_series,
    method_family,
    pareto_front,
    pareto_plot,
)
from lightning_fed.reporting.referral import collect_referrals
from lightning_fed.reporting.table import (
    collect_runs,
    diagnostics_markdown,
    has_selection_diagnostics,
    method_label,
    table1,
    to_markdown,
    write_diagnostics,
    write_runs,
    write_table,
)

__all__ = [
    "FAMILY_COLORS",
    "collect_referrals",
    "collect_runs",
    "diagnostics_markdown",
    "isolation_curve",
    "isolation_plot",
    "isolation_series",
    "method_family",
    "method_label",
    "pareto_front",
    "pareto_plot",
    "partner_graph_plot",
    "posterior_plot",
    "report",
    "table1",
    "to_markdown",
    "write_diagnostics",
    "write_runs",
    "write_table",
]


def report(root: Path, out: Path | None = None, reference: str | None = None) -> dict[str, Path]:
    """Write Table 1, the diagnostics and runs tables, the Pareto plot and the isolation plot.

    The Pareto plot's dashed upper bound is the mean AUROC of the method labelled ``centralized``
    (any label containing ``central``, the best one if several) when the runs include one.

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
        read, e.g. ``restored_best``, ``best_round``), ``pareto.png`` (when a run has a test AUROC)
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
        the paired contrasts of :mod:`lightning_fed.reporting.tier_contrasts`);
        with runs at several ``lambda``, ``lambda_table.md`` (Table 5's layout with the share of walks
        reaching the source, then each ``lambda`` against 0.9 paired by seed) and ``lambda_table.png``.

    Raises:
        ValueError: If ``root`` holds no run directory, or ``reference`` is not among its methods.
    """
    root = Path(root)
    out = Path(out) if out is not None else root / "report"
    runs = collect_runs(root)
    table = table1(runs, reference)
    md, csv = write_table(table, out / "table1")
    written = {"table1.md": md, "table1.csv": csv}
    diagnostics = write_diagnostics(table, out / "diagnostics")
    if diagnostics is not None:
        written["diagnostics.md"], written["diagnostics.csv"] = diagnostics
    written["runs.csv"] = write_runs(runs, out / "runs.csv")
    central = table.filter(pl.col("method").str.to_lowercase().str.contains("central"))["auroc_mean"]
    bound = central.drop_nulls().max()
    if table["auroc_mean"].drop_nulls().len():  # nothing to place without an AUROC
        written["pareto.png"] = pareto_plot(table, out / "pareto.png", centralized_auroc=bound)
    isolation = isolation_series(root)
    # Resting is a partner-selection outcome: on fixed graphs (gossip, EdgeDRM) and for FedAvg it is
    # 0 by construction, and a flat zero line is left out.
    if isolation.height and (has_selection_diagnostics(table) or isolation["isolation_rate"].max() > 0):
        written["isolation.png"] = isolation_plot(root, out / "isolation.png")
    referrals = collect_referrals(root)
    if referrals.height:
        from lightning_fed.referral.refer import write_referral
        from lightning_fed.referral.summary_plots import gain_plot

        written["referral.csv"], written["referral.md"] = write_referral(referrals, out)
        gain_plot(referrals, out / "referral_gain.png")
        written["referral_gain.png"] = out / "referral_gain.png"
    # A root of FedDRM runs alone (no referral: the centralized reference of Table 2, run on its own)
    # still gets its EdgeDRM-layout rows.
    written.update(_edgedrm_outputs(root, out))
    if any(c.startswith("share_") and c != "share_all" for c in referrals.columns):
        written.update(_tier_outputs(root, out, referrals))
    return written


def _edgedrm_outputs(root: Path, out: Path) -> dict[str, Path]:
    """The EdgeDRM paper's tables (:func:`report`'s ``edgedrm_*``, ``referral_reach.md``,
    ``lambda_table.*``) when any run under ``root`` has an EdgeDRM-layout row; ``{}`` otherwise."""
    from lightning_fed.io import write_text
    from lightning_fed.reporting import edgedrm_checkpoints as ec
    from lightning_fed.reporting import edgedrm_tables as et
    from lightning_fed.reporting.edgedrm_paired import edgedrm_paired, edgedrm_paired_markdown
    from lightning_fed.reporting.lambda_table import (
        lambda_markdown,
        lambda_paired,
        lambda_paired_markdown,
        lambda_plot,
        lambda_rows,
        lambda_table,
    )
    from lightning_fed.reporting.referral_reach import reach_markdown, reach_rows, reach_table

    rows = et.edgedrm_rows(root)
    if rows.height == 0:
        return {}
    written: dict[str, Path] = {}
    table = et.edgedrm_table(rows)
    margins = et.edgedrm_margins_markdown(et.edgedrm_margins(table))
    text = et.edgedrm_markdown(table)
    if margins:
        text += "\nEdgeDRM against the other decentralized methods, per graph:\n\n" + margins
    written["edgedrm_table.md"] = write_text(out / "edgedrm_table.md", text)
    settings = et.edgedrm_settings_markdown(table)
    written["edgedrm_settings.md"] = write_text(out / "edgedrm_settings.md", settings)
    texts = {
        "edgedrm_paired.md": edgedrm_paired_markdown(edgedrm_paired(rows)),
        "referral_reach.md": reach_markdown(reach_table(reach_rows(root))),
        "edgedrm_checkpoints.md": ec.checkpoint_markdown(ec.checkpoint_table(ec.checkpoint_rows(root))),
    }
    written.update({name: write_text(out / name, body) for name, body in texts.items() if body})
    sweep = lambda_rows(root)
    if sweep.height and sweep["lam"].n_unique() > 1:
        lam_table = lambda_table(sweep)
        paired = lambda_paired_markdown(lambda_paired(sweep))
        text = lambda_markdown(lam_table) + ("\n" + paired if paired else "")
        written["lambda_table.md"] = write_text(out / "lambda_table.md", text)
        lambda_plot(lam_table, out / "lambda_table.png")
        written["lambda_table.png"] = out / "lambda_table.png"
    return written


def _tier_outputs(root: Path, out: Path, referrals: pl.DataFrame) -> dict[str, Path]:
    """``referral_tiers.png`` and ``tier_table.md`` (Table 4's layout with its paired contrasts)."""
    from lightning_fed.io import write_text
    from lightning_fed.referral.summary_plots import tier_share_plot
    from lightning_fed.reporting.referral import tier_markdown, tier_rows, tier_table
    from lightning_fed.reporting.tier_contrasts import tier_contrasts, tier_contrasts_markdown

    tier_share_plot(referrals, out / "referral_tiers.png")
    written = {"referral_tiers.png": out / "referral_tiers.png"}
    found = tier_rows(root)
    tiers = tier_markdown(tier_table(found))
    contrasts = tier_contrasts_markdown(tier_contrasts(found))
    if tiers and contrasts:
        tiers += "\nPaired contrasts (seed by seed, 95 % t interval):\n\n" + contrasts
    if tiers:
        written["tier_table.md"] = write_text(out / "tier_table.md", tiers)
    return written
