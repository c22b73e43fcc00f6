"""The ABPS mechanism diagnostics per method (``diagnostics.md`` / ``.csv``), from Table 1's rows."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.render import markdown_table, number, percent, write_pair
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.tables.table1 import DIAGNOSTICS, runs_frame, table1

__all__ = [
    "SELECTION_DIAGNOSTICS",
    "SPEC",
    "diagnostics_markdown",
    "has_selection_diagnostics",
    "write_diagnostics",
]

#: The diagnostics only partner selection produces; ``bytes_vs_fedavg_same_rounds`` alone (every
#: decentralized method records it) repeats ``table1.md``'s bytes column and writes no diagnostics table.
SELECTION_DIAGNOSTICS: tuple[str, ...] = tuple(n for n in DIAGNOSTICS if n != "bytes_vs_fedavg_same_rounds")


def has_selection_diagnostics(table: pl.DataFrame) -> bool:
    """Whether any method of :func:`table1`'s output records a partner-selection diagnostic."""
    return any(
        name in table.columns and table[name].drop_nans().drop_nulls().len() for name in SELECTION_DIAGNOSTICS
    )


def diagnostics_markdown(table: pl.DataFrame) -> str | None:
    """The mechanism diagnostics of :func:`table1`'s output as a markdown table (``diagnostics.md``).

    Cells (means over seeds, ``-`` where no run of the method reports the value): same-unit rate
    with its chance level ``41.0 % (25.0 %)``, repeat rate ``12.5 %``, posterior spread ``0.031``,
    the share of center-rounds isolated by each cause (no candidates, no capacity, rejected,
    unavailable) ``1.2 %``, and bytes vs FedAvg run for the same rounds ``0.40x``.

    Returns:
        The markdown, or ``None`` when no method has a partner-selection diagnostic (e.g. only
        baselines, or EdgeDRM and gossip methods on a fixed graph, which record bytes alone).
    """
    if not has_selection_diagnostics(table):
        return None
    header = [
        "method",
        "same-unit rate (chance)",
        "repeat rate",
        "posterior spread",
        "isolated: no candidates",
        "no capacity",
        "rejected",
        "unavailable",
        "bytes vs FedAvg, same rounds",
    ]
    rows = []
    for r in table.iter_rows(named=True):
        same_unit = percent(r["partner_same_unit_rate"])
        if same_unit != "-" and percent(r["partner_same_unit_chance"]) != "-":
            same_unit += f" ({percent(r['partner_same_unit_chance'])})"
        cells = [
            r["method"],
            same_unit,
            percent(r["partner_repeat_rate"]),
            number(r["posterior_mean_spread"], ".3f"),
            *(
                percent(r[f"isolation_{cause}"])
                for cause in ("no_candidates", "no_capacity", "rejected", "unavailable")
            ),
            number(r["bytes_vs_fedavg_same_rounds"], ".2f", "x"),
        ]
        rows.append(cells)
    legend = (
        "Means over seeds; -: no run of the method reports it. Same-unit rate: share of partnerships"
        " within one care unit (chance level in brackets); isolated: share of center-rounds without a"
        " partner, by cause."
    )
    return markdown_table(header, rows, legend)


def write_diagnostics(df: pl.DataFrame, path_stem: str | Path) -> tuple[Path, Path] | None:
    """Write ``<stem>.md`` (see :func:`diagnostics_markdown`) and ``<stem>.csv`` (``method``,
    ``n_seeds`` and the :data:`DIAGNOSTICS`), atomically, when some method has a diagnostic.

    Args:
        df: The output of :func:`table1`.
        path_stem: Destination without suffix, e.g. ``runs/report/diagnostics``.

    Returns:
        The markdown and CSV paths, or ``None`` (nothing written) when no method has a diagnostic.
    """
    text = diagnostics_markdown(df)
    if text is None:
        return None
    return write_pair(text, df.select("method", "n_seeds", *DIAGNOSTICS), path_stem)


#: ``diagnostics.md`` / ``diagnostics.csv`` (``method``, ``n_seeds`` and the :data:`DIAGNOSTICS`).
SPEC = TableSpec(
    "diagnostics.md",
    runs_frame,
    lambda runs: diagnostics_markdown(table1(runs)) or "",
    "ABPS mechanism diagnostics per method: same-unit rate, repeats, posterior spread, isolation by cause",
    csv=lambda runs: table1(runs).select("method", "n_seeds", *DIAGNOSTICS),
)
