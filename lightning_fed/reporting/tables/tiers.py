"""The hospital-tier runs in the EdgeDRM paper's Table 4 layout (App. D.1), then its paired contrasts.

:func:`tier_table` / :func:`tier_markdown` condense the hospital-tier runs: per graph
(``Tiers-layered`` / ``Tiers-shortcut``, keyed by the topology's ``shortcut`` flag, never pooled) and
condition (EdgeDRM-NR, history without prior, history with prior; weighted-history predictions),
mean +/- sample SD over seeds of the accuracy, calls per query, the large tier's share of calls and
calls per 100 arrivals, and the peak client share. Conditions are selected by router key
(:data:`~lightning_fed.reporting.families.TIER_CONDITIONS`).

The paper reads three orderings from it: the sample-count prior raises the large tier's share of
calls, the shortcut edges amplify that, and referral does not cost accuracy. Each is a difference
between two cells that share a seed, so :func:`tier_contrasts` tests it as a paired difference over
seeds (95 % Student-t interval, :func:`~lightning_fed.reporting.stats.paired_comparison`):

- within a graph, ``History + prior`` minus ``History, no prior`` and ``History + prior`` minus
  ``EdgeDRM-NR``: the two conditions of a seed share the model, the query panel and the arrival
  records (App. D.1), so the difference isolates the prior (resp. the referral);
- across graphs, ``Tiers-shortcut`` minus ``Tiers-layered`` for ``History + prior``: both graphs of a
  seed share the partition and the panel (``configs/sweeps/edgedrm_tiers.yaml``), but each graph
  trains its own model, so this difference also carries training noise.

Contrasted quantities: ``accuracy`` (%), ``share_large`` (% of classifier calls on the large tier)
and ``peak_share`` (% of calls on the busiest client).
"""

from __future__ import annotations

import polars as pl

from lightning_fed.render import interval, markdown_table
from lightning_fed.reporting.families import TIER_CONDITIONS
from lightning_fed.reporting.runs import RunSource, as_records
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import by_seed, paired_comparison

__all__ = [
    "QUANTITIES",
    "SPEC",
    "tier_contrasts",
    "tier_contrasts_markdown",
    "tier_markdown",
    "tier_rows",
    "tier_table",
]

#: Table 4's quantities: ``referral.csv`` column -> header (accuracy in percent; the markdown gives the
#: peak share 3 decimals: EdgeDRM-NR's is 100 / 32 = 3.125).
_TIER_COLUMNS = {
    "accuracy": "Accuracy (%)",
    "calls_per_query": "Calls/query",
    "share_large": "Large share (%)",
    "calls_per_100_large": "Large calls/100",
    "peak_share": "Peak share (%)",
}


def tier_rows(source: RunSource, rule: str = "weighted history") -> pl.DataFrame:
    """One row per (tier run, Table 4 condition): ``run``, ``graph``, ``seed``, ``condition``,
    ``queries`` and the Table 4 quantities, from every run whose referral table has a large tier
    (``share_large``), with prediction rule ``rule``."""
    records = as_records(source)
    rows = []
    for record in records:
        table = record.routers
        if table is None or not record.has_config or "share_large" not in table.columns:
            continue
        setting = record.setting
        for r in table.filter(pl.col("prediction_rule") == rule).iter_rows(named=True):
            if r["router_key"] in TIER_CONDITIONS:
                rows.append(
                    {
                        "run": record.name,
                        "graph": setting["graph"],
                        "seed": setting["seed"],
                        "condition": TIER_CONDITIONS[r["router_key"]],
                        "queries": r.get("queries") or "test",
                        **{c: float(r[c]) * (100.0 if c == "accuracy" else 1.0) for c in _TIER_COLUMNS},
                    }
                )
    return pl.DataFrame(rows)


def tier_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample SD (``<column>_mean`` / ``<column>_sd``) per (graph, condition), with ``seeds``
    and the ``queries`` the runs used (joined when they differ)."""
    if rows.height == 0:
        return pl.DataFrame()
    stats = [pl.col(c).mean().alias(f"{c}_mean") for c in _TIER_COLUMNS]
    stats += [pl.col(c).std().alias(f"{c}_sd") for c in _TIER_COLUMNS]
    order = {name: k for k, name in enumerate(TIER_CONDITIONS.values())}
    return (
        rows.group_by("graph", "condition")
        .agg(
            *stats,
            pl.col("seed").n_unique().alias("seeds"),
            pl.col("queries").unique().sort().str.join(", ").alias("queries"),
        )
        .with_columns(pl.col("condition").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
        .sort("graph", "_order")
        .drop("_order")
    )


def tier_markdown(table: pl.DataFrame) -> str:
    """:func:`tier_table` in Table 4's layout (``Tiers-layered: EdgeDRM-NR`` rows, ``mean ± SD``)."""
    if table.height == 0:
        return ""

    def cell(r: dict, c: str) -> str:
        mean, sd, d = r[f"{c}_mean"], r[f"{c}_sd"], 3 if c == "peak_share" else 2  # 3.125 = 100 / 32
        return f"{mean:.{d}f}" if sd is None else f"{mean:.{d}f} ± {sd:.{d}f}"

    head = ["Condition", *_TIER_COLUMNS.values(), "Seeds", "Queries"]
    rows = [
        [
            f"{r['graph']}: {r['condition']}",
            *(cell(r, c) for c in _TIER_COLUMNS),
            str(r["seeds"]),
            r["queries"],
        ]
        for r in table.iter_rows(named=True)
    ]
    return markdown_table(head, rows)


#: Contrasted quantities: tier_rows column -> label.
QUANTITIES = {"accuracy": "accuracy (pp)", "share_large": "large share (pp)", "peak_share": "peak share (pp)"}
_PRIOR, _NO_PRIOR, _NR = "History + prior", "History, no prior", "EdgeDRM-NR"
_LAYERED, _SHORTCUT = "Tiers-layered", "Tiers-shortcut"


def _values(rows: pl.DataFrame, graph: str, condition: str, column: str) -> dict[int, float]:
    part = rows.filter((pl.col("graph") == graph) & (pl.col("condition") == condition))
    return by_seed(part["seed"], part[column])


def tier_contrasts(rows: pl.DataFrame) -> pl.DataFrame:
    """The contrasts of the module docstring, one row per (contrast, quantity).

    Args:
        rows: :func:`tier_rows`.

    Returns:
        Columns ``contrast, quantity, seeds, diff, ci_low, ci_high, verdict``; a contrast whose cells
        are absent is left out (empty frame when there is none).
    """
    if rows.height == 0:
        return pl.DataFrame()
    pairs = []
    for graph in sorted(set(rows["graph"])):
        pairs.append((f"{graph}: prior minus no prior", (graph, _PRIOR), (graph, _NO_PRIOR)))
        pairs.append((f"{graph}: prior minus EdgeDRM-NR", (graph, _PRIOR), (graph, _NR)))
    pairs.append(("History + prior: shortcut minus layered", (_SHORTCUT, _PRIOR), (_LAYERED, _PRIOR)))
    out = []
    for name, a, b in pairs:
        for column in QUANTITIES:
            ours, theirs = _values(rows, *a, column), _values(rows, *b, column)
            if not ours or not theirs:
                continue
            d = paired_comparison(ours, theirs)
            out.append(
                {
                    "contrast": name,
                    "quantity": column,
                    "seeds": d.n_paired,
                    "diff": d.mean,
                    "ci_low": d.ci_low,
                    "ci_high": d.ci_high,
                    "verdict": d.verdict,
                }
            )
    return pl.DataFrame(out)


def tier_contrasts_markdown(contrasts: pl.DataFrame) -> str:
    """:func:`tier_contrasts` as markdown (differences in percentage points, 95 % CI, verdict)."""
    if contrasts.height == 0:
        return ""
    rows = [
        [
            r["contrast"],
            QUANTITIES[r["quantity"]],
            str(r["seeds"]),
            interval(r["diff"], r["ci_low"], r["ci_high"]),
            r["verdict"],
        ]
        for r in contrasts.iter_rows(named=True)
    ]
    return markdown_table(["contrast", "quantity", "seeds", "difference [95 % CI]", "verdict"], rows)


def _tiers_with_contrasts(rows: pl.DataFrame) -> str:
    tiers, contrasts = tier_markdown(tier_table(rows)), tier_contrasts_markdown(tier_contrasts(rows))
    if tiers and contrasts:
        tiers += "\nPaired contrasts (seed by seed, 95 % t interval):\n\n" + contrasts
    return tiers


#: ``tier_table.md``.
SPEC = TableSpec(
    "tier_table.md",
    tier_rows,
    _tiers_with_contrasts,
    "EdgeDRM Table 4: per tier graph and condition, mean ± SD over seeds, then the paired contrasts",
    gate="tiers",
)
