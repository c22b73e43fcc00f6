"""FedDRM minus the decentralized methods of Table 2 (32 clients), paired by seed.

The FedDRM runs and the decentralized runs were made in different sessions, and only the latter's
report (``../referral.csv``) was kept, so ``lightning-fed report`` cannot pair them. This script does
what ``edgedrm_paired.md`` does for one folder: per setting, FedDRM's ``feddrm_accuracy`` of each seed
(``run_summaries/*/summary.json``) against each method's accuracy on the same seed (the referral-table
rows the EdgeDRM tables read, named by :func:`~lightning_fed.reporting.edgedrm_tables.table_method`),
with :func:`lightning_fed.reporting.paired.paired_comparison`'s 95 % t interval. Prints markdown.

Run from the repository root: ``python docs/results/edgedrm_table2_cpu/feddrm/paired.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from lightning_fed.reporting.edgedrm_tables import table_method
from lightning_fed.reporting.paired import format_interval, paired_comparison

HERE = Path(__file__).resolve().parent
#: The decentralized methods FedDRM is compared with, named as the EdgeDRM tables name them.
METHODS = ("DFedAvgM", "EdgeDRM-NR", "EdgeDRM")
SETTINGS = {"spc5": "5-SPC", "dir03": "Dir-0.3"}


def _seed(run: str) -> int:
    return int(run.rsplit("-seed", 1)[1])


def main() -> None:
    referral = pl.read_csv(HERE.parent / "referral.csv")
    names = [table_method(r, rule) for r, rule in referral.select("router", "prediction_rule").iter_rows()]
    referral = referral.with_columns(pl.Series("method", names, dtype=pl.String))
    per_seed = ["| setting | seed | FedDRM (%) | routed to the source (%) | balanced accuracy (%) |"]
    per_seed.append("|---|---|---|---|---|")
    paired = ["| setting | FedDRM minus | difference [95 % CI] | verdict | per seed |"]
    paired.append("|---|---|---|---|---|")
    for key, setting in SETTINGS.items():
        feddrm = {}
        for path in sorted(HERE.glob(f"run_summaries/fmnist32-{key}-feddrm-seed*/summary.json")):
            summary = json.loads(path.read_text())
            feddrm[int(summary["seed"])] = 100 * summary["feddrm_accuracy"]
            cells = [100 * summary[k] for k in ("feddrm_accuracy", "feddrm_source_accuracy")]
            cells.append(100 * summary["feddrm_balanced_accuracy"])
            row = " | ".join(f"{v:.2f}" for v in cells)
            per_seed.append(f"| {setting} | {summary['seed']} | {row} |")
        for name in METHODS:
            part = referral.filter(
                pl.col("run").str.starts_with(f"fmnist32-{key}-edgedrm") & (pl.col("method") == name)
            )
            theirs = {_seed(r["run"]): 100 * r["accuracy"] for r in part.iter_rows(named=True)}
            d = paired_comparison(feddrm, theirs)
            seeds = ", ".join(f"{s}: {feddrm[s] - theirs[s]:+.2f}" for s in sorted(feddrm) if s in theirs)
            interval = format_interval(d.mean, d.ci_low, d.ci_high)
            paired.append(f"| {setting} | {name} | {interval} | {d.verdict} | {seeds} |")
    print("\n".join(per_seed) + "\n\n" + "\n".join(paired))


if __name__ == "__main__":
    main()
