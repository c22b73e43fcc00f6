"""Routers paired query by query (``referral_queries_paired.md``), from ``referral_queries.parquet``.

``edgedrm_paired.md`` pairs methods over seeds: three numbers per comparison with the paper's three
seeds, so most intervals contain 0. Within one EdgeDRM run every router answers the *same* queries
from the *same* entry clients (``lightning-fed refer``), so each query gives one paired difference

    d_q = 1{EdgeDRM right on q} - 1{router right on q}   (in {-1, 0, 1})

and a cell (graph, setting, ``lambda``) over its seeds gives one set of ``d_q`` per seed. The
table reports the mean over seeds of the per-seed mean ``d_q`` (in accuracy points) with a
hierarchical bootstrap interval, seeds resampled then queries within each seed
(:func:`~lightning_fed.reporting.stats.hierarchical_bootstrap`, 2,000 resamples, seeded), which keeps
the seed-to-seed spread (partition, split, entries) in the interval as well as the query noise. The
headline is EdgeDRM with the weighted-history rule (:data:`lightning_fed.referral.refer.HEADLINE`);
each other router is taken with the same rule, or, where it has no row for it (the stage-I and
baseline rows answer at the entry), with its first rule. A ``--baselines`` row, whose key names its
run folder (one per seed), is paired under its method (``Local``, ``DisPFL``, ...), so its seeds pool
into one row like every other router's. Verdicts read the interval as everywhere in the report.
"""

from __future__ import annotations

import polars as pl

from lightning_fed.render import interval, markdown_table, number
from lightning_fed.reporting.families import baseline_method
from lightning_fed.reporting.runs import RunSource, as_records
from lightning_fed.reporting.settings import graph_order
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import hierarchical_bootstrap, verdict

__all__ = ["SPEC", "query_paired_markdown", "query_paired_rows"]

#: The headline (router key, prediction rule); :data:`lightning_fed.referral.refer.HEADLINE`.
HEADLINE = ("EdgeDRM", "weighted history")
_CELL = ("graph", "dataset", "partition", "clients", "lam")


def _pick(queries: pl.DataFrame, key: str) -> pl.DataFrame:
    """One router's per-query rows under the headline's rule, else its first rule."""
    rows = queries.filter(pl.col("router_key") == key)
    rules = rows["prediction_rule"].unique(maintain_order=True).to_list()
    rule = HEADLINE[1] if HEADLINE[1] in rules else rules[0]
    return rows.filter(pl.col("prediction_rule") == rule).sort("query")


def query_paired_rows(source: RunSource) -> pl.DataFrame:
    """One row per (run, router other than the headline): the cell's setting columns, ``seed``,
    ``router`` (a ``--baselines`` row: its method), ``rule``, ``queries``, both accuracies (%) and
    ``diffs`` (the per-query ``d_q`` x 100), from every run with a ``referral_queries.parquet`` that
    holds the headline."""
    rows = []
    for record in as_records(source):
        queries = record.referral_queries
        if queries is None or not record.has_config:
            continue
        if queries.filter(
            (pl.col("router_key") == HEADLINE[0]) & (pl.col("prediction_rule") == HEADLINE[1])
        ).is_empty():
            continue
        ours = _pick(queries, HEADLINE[0])
        mine = ours["correct"].cast(pl.Float64)
        setting = {k: record.setting.get(k) for k in _CELL if k != "lam"}
        for key in queries["router_key"].unique(maintain_order=True).to_list():
            if key == HEADLINE[0]:
                continue
            theirs = _pick(queries, key)
            if not theirs["query"].equals(ours["query"]):
                continue  # another query set (never written by refer, but a hand-made file could)
            other = theirs["correct"].cast(pl.Float64)
            rule = theirs["prediction_rule"][0]
            rows.append(
                {
                    "run": record.name,
                    **setting,
                    "lam": record.lam,
                    "seed": record.seed,
                    "router": baseline_method(key, rule) or key,
                    "rule": rule,
                    "queries": ours.height,
                    "headline_accuracy": 100.0 * float(mine.mean()),
                    "router_accuracy": 100.0 * float(other.mean()),
                    "diffs": (100.0 * (mine - other)).to_list(),
                }
            )
    return pl.DataFrame(rows)


def query_paired_markdown(rows: pl.DataFrame) -> str:
    """One row per (cell, router): seeds, queries, both accuracies (mean over seeds), the
    query-paired difference with its interval, and the verdict; ``""`` without rows."""
    if rows.height == 0:
        return ""
    head = [
        "graph",
        "setting",
        "lambda",
        "router",
        "rule",
        "seeds",
        "queries",
        "EdgeDRM (%)",
        "router (%)",
        "EdgeDRM - router [95 % CI]",
        "verdict",
    ]
    body = []
    groups = rows.partition_by(*_CELL, "router", as_dict=True, maintain_order=True)
    for key in sorted(groups, key=lambda k: (graph_order(str(k[0])), *map(str, k[1:]))):
        graph, dataset, partition, _, lam, router = key
        part = groups[key]
        diffs = {int(s): d for s, d in zip(part["seed"], part["diffs"], strict=True)}
        mean, low, high = hierarchical_bootstrap(diffs)
        body.append(
            [
                str(graph),
                f"{dataset} {partition}",
                f"{lam:g}",
                str(router),
                str(part["rule"][0]),
                str(part.height),
                str(int(part["queries"].sum())),
                number(part["headline_accuracy"].mean(), ".2f"),
                number(part["router_accuracy"].mean(), ".2f"),
                interval(mean, low, high),
                verdict(low, high),
            ]
        )
    legend = (
        "Each query is answered by every router from the same entry client, so the difference is "
        "paired by query within each seed (d_q x 100 accuracy points), averaged over seeds; the "
        "interval is a bootstrap over seeds, then queries within each seed (2,000 resamples, "
        "seeded). EdgeDRM is the weighted-history rule; each router takes the same rule where it has "
        "one, else its only rule."
    )
    return markdown_table(head, body, legend)


#: ``referral_queries_paired.md``.
SPEC = TableSpec(
    "referral_queries_paired.md",
    query_paired_rows,
    query_paired_markdown,
    "EdgeDRM minus every other router, paired by query within seed, hierarchical bootstrap interval",
    gate="edgedrm",
)
