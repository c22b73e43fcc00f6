"""The task-routing weight sweep in the EdgeDRM paper's Table 5 layout (App. D.2.3).

Table 5 reports, per ``lambda``, EdgeDRM's accuracy, EdgeDRM-NR's (the same stage-II heads, no
referral), the referral gain (EdgeDRM minus NR) and EdgeDRM's classifier calls per query, each as
mean +/- sample SD over the training seeds. Here every EdgeDRM run folder with a ``referral.csv``
contributes one row per run (its ``algorithm.init_args.lam``, seed and setting), read with one
prediction rule (default: weighted history, the paper's primary rule). The gain is computed per run
and then averaged, so its SD is the SD of the paired differences, not a difference of SDs.
:func:`lambda_markdown` is written by ``lightning-fed report`` as ``lambda_table.md`` when the runs
under the root span more than one ``lambda`` (``configs/sweeps/edgedrm_lambda_cpu.yaml``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.reporting.referral import referral_runs

__all__ = ["lambda_markdown", "lambda_rows", "lambda_table"]


def lambda_rows(root: Path, rule: str = "weighted history") -> pl.DataFrame:
    """One row per EdgeDRM run under ``root``: ``run``, the setting columns, ``lam``, ``seed``,
    ``edgedrm``, ``nr`` (accuracy in percent with prediction rule ``rule``), ``gain`` and ``calls``."""
    from lightning_fed.reporting.edgedrm_tables import run_lambda, run_setting

    rows = []
    for run, config, referrals in referral_runs(root):
        table = referrals.filter(pl.col("prediction_rule") == rule)
        found = {
            r["router"]: r for r in table.iter_rows(named=True) if r["router"] in ("EdgeDRM", "EdgeDRM-NR")
        }
        if len(found) < 2:
            continue
        edgedrm, nr = 100.0 * found["EdgeDRM"]["accuracy"], 100.0 * found["EdgeDRM-NR"]["accuracy"]
        rows.append(
            {
                "run": run.name,
                **run_setting(config),
                "lam": run_lambda(config),
                "edgedrm": edgedrm,
                "nr": nr,
                "gain": edgedrm - nr,
                "calls": float(found["EdgeDRM"]["calls_per_query"]),
            }
        )
    return pl.DataFrame(rows)


def lambda_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample SD (``<column>_mean`` / ``<column>_sd``) per (setting, ``lam``), with ``seeds``."""
    if rows.height == 0:
        return pl.DataFrame()
    keys = ["dataset", "partition", "clients", "graph", "lam"]
    columns = ("edgedrm", "nr", "gain", "calls")
    return (
        rows.group_by(keys)
        .agg(
            *[pl.col(c).mean().alias(f"{c}_mean") for c in columns],
            *[pl.col(c).std(ddof=1).alias(f"{c}_sd") for c in columns],
            pl.col("seed").n_unique().alias("seeds"),
        )
        .sort(keys)
    )


def lambda_markdown(table: pl.DataFrame) -> str:
    """:func:`lambda_table` as Table 5 (one block per setting; ``mean ± SD``); "" without rows."""
    if table.height == 0:
        return ""

    def cell(r: dict, c: str) -> str:
        mean, sd = r[f"{c}_mean"], r[f"{c}_sd"]
        return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f}"

    head = "| lambda | EdgeDRM | EdgeDRM-NR | Referral gain | Calls | Seeds |\n|---|---|---|---|---|---|"
    blocks = []
    for key, part in table.group_by(["dataset", "partition", "clients", "graph"], maintain_order=True):
        dataset, partition, clients, graph = key
        lines = [f"{dataset} / {partition}, {clients} clients, {graph}:", "", head]
        for r in part.sort("lam").iter_rows(named=True):
            values = [
                f"{r['lam']:.2f}",
                *(cell(r, c) for c in ("edgedrm", "nr", "gain", "calls")),
                str(r["seeds"]),
            ]
            lines.append("| " + " | ".join(values) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
