"""Paired contrasts behind the hospital-tier orderings (EdgeDRM App. D.1, Table 4), seed by seed.

Table 4 (:func:`~lightning_fed.reporting.referral.tier_table`) gives mean +/- SD per graph and
condition. The paper reads three orderings from it: the sample-count prior raises the large tier's
share of calls, the shortcut edges amplify that, and referral does not cost accuracy. Each is a
difference between two cells that share a seed, so it is tested here as a paired difference over
seeds (95 % Student-t interval, :func:`~lightning_fed.reporting.paired.paired_comparison`):

- within a graph, ``History + prior`` minus ``History, no prior`` and ``History + prior`` minus
  ``EdgeDRM-NR``: the two conditions of a seed share the model, the query panel and the arrival
  records (App. D.1), so the difference isolates the prior (resp. the referral);
- across graphs, ``Tiers-shortcut`` minus ``Tiers-layered`` for ``History + prior``: both graphs of a
  seed share the partition and the panel (``configs/sweeps/edgedrm_tiers.yaml``), but each graph
  trains its own model, so this difference also carries training noise.

Quantities: ``accuracy`` (%), ``share_large`` (% of classifier calls on the large tier) and
``peak_share`` (% of calls on the busiest client).
"""

from __future__ import annotations

import polars as pl

from lightning_fed.reporting.paired import by_seed, format_interval, paired_comparison

__all__ = ["QUANTITIES", "tier_contrasts", "tier_contrasts_markdown"]

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
        rows: :func:`~lightning_fed.reporting.referral.tier_rows`.

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
    lines = ["| contrast | quantity | seeds | difference [95 % CI] | verdict |", "|---|---|---|---|---|"]
    for r in contrasts.iter_rows(named=True):
        text = format_interval(r["diff"], r["ci_low"], r["ci_high"])
        lines.append(
            f"| {r['contrast']} | {QUANTITIES[r['quantity']]} | {r['seeds']} | {text} | {r['verdict']} |"
        )
    return "\n".join(lines) + "\n"
