"""Paired seed-by-seed differences behind the EdgeDRM tables' orderings (``edgedrm_paired.md``).

The Table 1 / Table 2 layouts (:mod:`lightning_fed.reporting.tables.edgedrm`) show mean +/- SD per
cell, and the margins table condenses means. Neither says whether an ordering is larger than the
seed noise. Here every comparison the paper's Sec. 5.2 makes is a paired difference over the seeds
both methods share, in one (graph, setting) cell:

    d_s = acc_EdgeDRM(s) - acc_X(s),   d_bar -/+ t_{0.975, n-1} s_d / sqrt(n)

(:func:`~lightning_fed.reporting.stats.paired_comparison`, 95 % Student-t interval). The methods of
one cell and seed were evaluated on the same test queries, entering at the same clients: the
baselines and DFedAvgM / EdgeDRM-NR come from the EdgeDRM run's own referral table, and FedDRM is
evaluated on the same pooled test split. Pairing by seed therefore removes the spread the methods
share (the partition, the split, the entry draws). With three seeds (the paper's 2025-2027) the t
quantile is 4.30, so an interval excludes 0 only when the differences are consistent across seeds.

The comparators ``X``, per cell:

- ``DFedAvgM``: EdgeDRM's stage-I model, the paper's matched control (parity is expected on the
  complete graph: an interval containing 0 there is "within noise", i.e. parity at this noise level);
- ``EdgeDRM-NR``: the referral gain (the paper: positive in every configuration);
- the strongest other decentralized method, chosen by its mean in the cell (``best_other``; when
  that is DFedAvgM or EdgeDRM-NR, their row is marked instead of repeated). Choosing the strongest
  comparator by its mean favours it slightly (a winner's-curse bias), which makes a "better"
  verdict conservative;
- ``FedDRM``: the centralized reference (the paper: above every decentralized method).

A verdict reads the interval: ``better`` (above 0), ``worse`` (below 0), ``within noise`` (contains 0),
``n/a`` (fewer than two shared seeds).
"""

from __future__ import annotations

import polars as pl

from lightning_fed.render import interval, markdown_table
from lightning_fed.reporting.settings import REFERENCE_GROUP, graph_order
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import by_seed, paired_comparison
from lightning_fed.reporting.tables.edgedrm import REFERENCE_METHODS, edgedrm_rows

__all__ = ["OURS", "SPEC", "edgedrm_paired", "edgedrm_paired_markdown"]

#: The method every row of the paired table is measured from.
OURS = "EdgeDRM"
#: Fixed comparators (in row order); the strongest other decentralized method is added per cell.
_FIXED = ("DFedAvgM", "EdgeDRM-NR")
_SETTING = ("dataset", "partition", "clients")


def _by_seed(cell: pl.DataFrame, method: str) -> dict[int, float]:
    part = cell.filter(pl.col("method") == method)
    return by_seed(part["seed"], part["accuracy"])


def _row(graph: str, setting: tuple, role: str, method: str, ours: dict, theirs: dict) -> dict:
    diff = paired_comparison(ours, theirs)
    dataset, partition, clients = setting
    return {
        "graph": graph,
        "dataset": dataset,
        "partition": partition,
        "clients": clients,
        "comparator": role,
        "method": method,
        "seeds": diff.n_paired,
        "diff": diff.mean,
        "ci_low": diff.ci_low,
        "ci_high": diff.ci_high,
        "verdict": diff.verdict,
    }


def edgedrm_paired(rows: pl.DataFrame) -> pl.DataFrame:
    """EdgeDRM minus each comparator (module docstring), one row per (graph, setting, comparator).

    Args:
        rows: :func:`~lightning_fed.reporting.tables.edgedrm.edgedrm_rows` (one row per run, method and
            seed, ``accuracy`` in %).

    Returns:
        Columns ``graph, dataset, partition, clients, comparator, method, seeds, diff, ci_low,
        ci_high, verdict, best_other`` (differences in percentage points); empty when no cell has EdgeDRM.
    """
    if rows.height == 0 or OURS not in set(rows["method"]):
        return pl.DataFrame()
    out = []
    graphs = sorted(set(rows["graph"]) - {REFERENCE_GROUP}, key=graph_order)
    for graph in graphs:
        here = rows.filter(pl.col("graph") == graph)
        for key in sorted(set(here.select(_SETTING).iter_rows())):
            cond = [pl.col(c) == v for c, v in zip(_SETTING, key, strict=True)]
            cell = here.filter(*cond)
            ours = _by_seed(cell, OURS)
            if not ours:
                continue
            methods = set(cell["method"]) - {OURS, *REFERENCE_METHODS}
            means = {m: sum(v) / len(v) for m in methods if (v := list(_by_seed(cell, m).values()))}
            best = max(sorted(means), key=means.__getitem__) if means else None
            for m in [m for m in _FIXED if m in methods]:
                out.append(_row(graph, key, m, m, ours, _by_seed(cell, m)) | {"best_other": m == best})
            if best is not None and best not in _FIXED:
                out.append(
                    _row(graph, key, "best other", best, ours, _by_seed(cell, best)) | {"best_other": True}
                )
            reference = rows.filter(pl.col("graph") == REFERENCE_GROUP, *cond)
            if "FedDRM" in set(reference["method"]):
                feddrm = _row(graph, key, "FedDRM", "FedDRM", ours, _by_seed(reference, "FedDRM"))
                out.append(feddrm | {"best_other": False})
    return pl.DataFrame(out)


def edgedrm_paired_markdown(paired: pl.DataFrame) -> str:
    """:func:`edgedrm_paired` as markdown: one row per (graph, setting, comparator)."""
    if paired.height == 0:
        return ""
    header = ["graph", "setting", "EdgeDRM minus", "seeds", "difference (pp) [95 % CI]", "verdict"]
    mixed = paired["clients"].n_unique() > 1
    rows = []
    for r in paired.iter_rows(named=True):
        label = f"{r['method']} (best other)" if r["best_other"] else r["method"]
        setting = f"{r['dataset']} {r['partition']}" + (f" ({r['clients']} clients)" if mixed else "")
        text = interval(r["diff"], r["ci_low"], r["ci_high"])
        rows.append([r["graph"], setting, label, str(r["seeds"]), text, r["verdict"]])
    return markdown_table(header, rows)


#: ``edgedrm_paired.md``.
SPEC = TableSpec(
    "edgedrm_paired.md",
    edgedrm_rows,
    lambda rows: edgedrm_paired_markdown(edgedrm_paired(rows)),
    "EdgeDRM minus DFedAvgM, EdgeDRM-NR, the best other method and FedDRM, paired by seed",
    gate="edgedrm",
)
