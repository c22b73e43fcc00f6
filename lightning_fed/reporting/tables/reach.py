"""Does referral reach the source? The mechanism diagnostic behind the EdgeDRM tables (``referral_reach.md``).

EdgeDRM's referral gain rests on one mechanism (Sec. 3): the learned potentials move a query toward
the client whose data it resembles, ideally its source, whose expert answers it best. The referral
table (``lightning-fed refer``, test queries) records per router the share of walks that visit the
query's source (``source_reached``) and the share of queries whose source lies within ``L`` moves
of the entry (``source_in_reach``: the ceiling for any router that moves along edges, a property of
the graph and the entry draw). Per graph, setting and EdgeDRM ``lambda`` (runs at another task weight
than the paper's 0.9, the Table 5 sweep, are never pooled with it; the ``lambda`` column appears when
the runs have several), mean +/- sample SD over the seeds:

- ``in reach``: the ceiling;
- one column per router (EdgeDRM, EdgeDRM w/o prior, count-only, random): ``source_reached``. A
  router that learns moves toward the source reaches it more often than the random walk with the
  same budget; the gap between EdgeDRM's value and the ceiling is what routing leaves on the table.
"""

from __future__ import annotations

import polars as pl

from lightning_fed.render import markdown_table, mean_sd
from lightning_fed.reporting.families import REACH_ROUTERS
from lightning_fed.reporting.runs import RunSource, as_records
from lightning_fed.reporting.settings import graph_order
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import mean_sd_by

__all__ = ["SPEC", "reach_markdown", "reach_rows", "reach_table"]


def reach_rows(source: RunSource) -> pl.DataFrame:
    """One row per (referral run, router): setting columns, ``lam``, ``router`` (its key),
    ``source_reached``, ``source_in_reach`` (%), from every run whose referral table has the source
    columns."""
    records = as_records(source)
    rows = []
    for record in records:
        table = record.routers
        if table is None or not record.has_config or "source_reached" not in table.columns:
            continue
        setting = {**record.setting, "lam": record.lam}
        seen = set()
        for r in table.iter_rows(named=True):
            router = str(r["router_key"])
            if router in REACH_ROUTERS and router not in seen and r["source_reached"] is not None:
                seen.add(router)  # the walk (hence the columns) is the same for every prediction rule
                rows.append(
                    {
                        "run": record.name,
                        **setting,
                        "router": router,
                        "source_reached": float(r["source_reached"]),
                        "source_in_reach": float(r["source_in_reach"]),
                    }
                )
    return pl.DataFrame(rows)


def reach_table(rows: pl.DataFrame) -> pl.DataFrame:
    """:func:`~lightning_fed.reporting.stats.mean_sd_by` per (graph, dataset, partition,
    clients, lam, router) of ``source_reached`` and ``source_in_reach``, with ``seeds``."""
    keys = ["graph", "dataset", "partition", "clients", "lam", "router"]
    return mean_sd_by(rows, keys, ["source_reached", "source_in_reach"])


def reach_markdown(table: pl.DataFrame) -> str:
    """:func:`reach_table` as markdown: one row per (graph, setting), the ceiling, then one column
    per router; "" without rows."""
    if table.height == 0:
        return ""
    routers = [r for r in REACH_ROUTERS if r in set(table["router"])]
    lambdas = table["lam"].n_unique() > 1
    head = ["graph", "setting", *(["lambda"] if lambdas else []), "seeds", "in reach (%)"]
    head += [f"{r} reached (%)" for r in routers]
    rows = []
    groups = table.partition_by("graph", "dataset", "partition", "clients", "lam", as_dict=True)
    for key in sorted(groups, key=lambda k: (graph_order(k[0]), k[1:])):
        graph, dataset, partition, _, lam = key
        part = groups[key]
        by = {r["router"]: r for r in part.iter_rows(named=True)}
        first = next(iter(by.values()))
        cells = [mean_sd(by[r], "source_reached", ".1f") if r in by else "-" for r in routers]
        values = [graph, f"{dataset} {partition}", *([f"{lam:g}"] if lambdas else [])]
        values += [str(first["seeds"]), mean_sd(first, "source_in_reach", ".1f")]
        rows.append([*values, *cells])
    return markdown_table(head, rows)


#: ``referral_reach.md``.
SPEC = TableSpec(
    "referral_reach.md",
    reach_rows,
    lambda rows: reach_markdown(reach_table(rows)),
    "share of test queries whose source is within L moves, and the share each router's walks reach it",
    gate="edgedrm",
)
