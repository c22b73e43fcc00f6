"""Each center's support and interval for one method (``centers.md`` / ``centers.csv``).

The rows are the ``centers.parquet`` of the chosen method's runs (the reference, ``fedavg`` by
default), one per seed and center; the markdown shows the run with the lowest seed, largest test
split first: rows, positives and negatives of the test split, the AUROC with its DeLong (1988) 95 %
interval, and whether it is fragile (one case of a class) or robust. Runs written before
``centers.parquet`` give no rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from lightning_fed.render import markdown_table, number
from lightning_fed.reporting.runs import RunRecord
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.tables.table1 import DEFAULT_REFERENCE

__all__ = ["SUPPORT_COLUMNS", "center_rows", "centers_markdown", "spec"]

#: The support and interval columns of one center's test split (``centers.parquet``, ``holdout.parquet``).
SUPPORT_COLUMNS = (
    "n_train",
    "test_n",
    "test_positives",
    "test_negatives",
    "test_auroc",
    "test_auroc_low",
    "test_auroc_high",
    "test_auroc_fragile",
    "test_robust",
)
_COLUMNS = ("center", "name", *SUPPORT_COLUMNS)


def center_rows(records: Sequence[RunRecord], method: str | None) -> pl.DataFrame:
    """``method``'s runs' ``centers.parquet`` rows with ``method``, ``seed`` and ``run`` first (empty
    when no run of it has one, or ``method`` is None)."""
    frames = [
        r.centers.select([c for c in _COLUMNS if c in r.centers.columns]).select(
            pl.lit(r.label).alias("method"),
            pl.lit(r.seed).alias("seed"),
            pl.lit(r.name).alias("run"),
            pl.all(),
        )
        for r in records
        if method is not None and r.label == method and r.centers is not None
    ]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def centers_markdown(rows: pl.DataFrame) -> str:
    """The lowest seed's run of :func:`center_rows` as markdown, largest test split first."""
    if rows.height == 0:
        return ""
    first = rows.filter(pl.col("seed") == rows["seed"].min()) if rows["seed"].null_count() == 0 else rows
    first = first.filter(pl.col("run") == first["run"].min()).sort(
        ["test_n", "center"], descending=[True, False]
    )
    header = ["center", "train rows", "test rows", "deaths", "survivors", "test AUROC [95 % CI]", "support"]
    body = []
    for r in first.iter_rows(named=True):
        cell = number(r["test_auroc"], ".3f")
        if number(r["test_auroc_low"], ".3f") != "-":
            cell += f" [{r['test_auroc_low']:.3f}, {r['test_auroc_high']:.3f}]"
        support = "robust" if r["test_robust"] else "fragile" if r["test_auroc_fragile"] else ""
        if cell == "-":
            support = "undefined"
        body.append(
            [
                str(r["name"]),
                str(r["n_train"]),
                str(r["test_n"]),
                str(r["test_positives"]),
                str(r["test_negatives"]),
                cell,
                support,
            ]
        )
    legend = (
        f"Method {first['method'][0]}, run {first['run'][0]} (seed {first['seed'][0]}). Test AUROC with its"
        " DeLong (1988) 95 % interval (none where a class has fewer than two rows); undefined: one class in"
        " the test split; fragile: one case of a class; robust: at least trainer.robust_min_per_class of"
        " each (the centers of the robust mean). Every seed's rows are in centers.csv."
    )
    return markdown_table(header, body, legend)


def spec(reference: str | None = None) -> TableSpec:
    """``centers.md`` / ``centers.csv`` for the reference method (``fedavg`` when none is named)."""
    method = reference if reference is not None else DEFAULT_REFERENCE
    return TableSpec(
        "centers.md",
        lambda records: center_rows(records, method),
        centers_markdown,
        "Per center of the reference method: test rows, deaths, survivors, AUROC with its DeLong 95 % "
        "interval, fragile / robust",
        csv=lambda rows: rows,
    )
