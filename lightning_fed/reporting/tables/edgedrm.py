"""The EdgeDRM paper's Tables 1 and 2 from referral runs: graph x method rows, dataset x partition columns.

Every EdgeDRM run folder under the root contributes the rows of its ``referral.csv`` (written by
``lightning-fed refer``) that the paper reports, read as methods:

- ``EdgeDRM`` (score-weighted history), ``EdgeDRM-NR`` and ``DFedAvgM`` (the run's stage-I model at
  the entry client);
- ``Oracle router`` (weighted history): the oracle router on EdgeDRM experts
  (:class:`~lightning_fed.referral.routers.OracleSourceRouter`, a global source head fitted on the
  run's own pooled representations; older tables label it ``FedDRM (centralized)``, read the same);
  a reference, and not FedDRM;
- each ``--baselines`` row under its algorithm's name (``LocalOnly`` reads ``Local``; DisPFL and
  FedSPD runs appear under their names) at the entry client.

Every :class:`~lightning_fed.algorithms.FedDRM` run folder (its ``summary.json`` carries
``feddrm_accuracy``) contributes the ``FedDRM`` row: the paper's centralized reference, its own method
evaluated with its own selection head on the same test queries, one number per setting and seed. It
has no graph, so it sits in the ``Reference`` group (Table 1 layout: one row; Table 2 layout: its
column repeats the setting's value in every graph row).

The run's setting (:attr:`~lightning_fed.reporting.runs.RunRecord.setting`) names the column
(dataset, partition: ``5-SPC``, ``Dir-0.3``, ``balanced``) and the group (graph: ``Path``, ``Cycle``,
``RR4``, ``Complete``...) and the client count (a column label carries ``32 clients`` only when
client counts differ). Referral rows are selected by router key
(:func:`~lightning_fed.reporting.families.table_method`), so relabelled routers still count.
Cells are mean +/- sample SD of the accuracy (%) over the seeds found; per graph and column the best
decentralized method (not Local, FedDRM or the oracle router) is in bold, as in the paper.

:func:`edgedrm_settings_markdown` lays the same cells out like Table 2 (one row per graph and setting,
one column per method) and :func:`edgedrm_margins` condenses them into the comparisons the paper's
Sec. 5.2 makes: in how many settings EdgeDRM is the best decentralized method, its mean margin over
the strongest other one, its gap to DFedAvgM and its referral gain over EdgeDRM-NR, per graph.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from lightning_fed.render import markdown_table
from lightning_fed.reporting.families import table_method
from lightning_fed.reporting.runs import RunRecord, RunSource, as_records
from lightning_fed.reporting.settings import PRIMARY_LAMBDA, REFERENCE_GROUP, graph_order
from lightning_fed.reporting.spec import TableSpec

__all__ = [
    "FEDDRM_KEY",
    "REFERENCE_METHODS",
    "SETTINGS_SPEC",
    "TABLE_SPEC",
    "edgedrm_margins",
    "edgedrm_margins_markdown",
    "edgedrm_markdown",
    "edgedrm_rows",
    "edgedrm_settings_markdown",
    "edgedrm_table",
]

#: Methods shown as references, never marked best (the paper's "Reference" group, and the oracle).
REFERENCE_METHODS = ("Local", "FedDRM", "Oracle router")
_ORDER = ("Local", "FedDRM", "Oracle router", "DFedAvgM", "DisPFL", "FedSPD", "EdgeDRM-NR", "EdgeDRM")
#: ``summary.json`` key of a FedDRM run's accuracy (:class:`~lightning_fed.algorithms.FedDRM`).
FEDDRM_KEY = "feddrm_accuracy"


def _feddrm_row(record: RunRecord) -> dict[str, Any] | None:
    """The FedDRM row of a FedDRM run (a config, :data:`FEDDRM_KEY` in the summary), else None."""
    value = record.summary.get(FEDDRM_KEY)
    if not record.has_config or not isinstance(value, int | float) or record.algorithm != "feddrm":
        return None
    setting = {**record.setting, "graph": REFERENCE_GROUP}
    return {"run": record.name, **setting, "method": "FedDRM", "accuracy": 100.0 * float(value)}


def edgedrm_rows(source: RunSource) -> pl.DataFrame:
    """One row per (run, method): setting columns and ``accuracy`` (%), from every referral run and
    every FedDRM run (module docstring)."""
    records = as_records(source)
    rows = []
    for record in records:
        table = record.routers
        if table is None or not record.has_config:
            continue
        # A run off the paper's primary lambda (0.9) is its own method, never pooled with it (the
        # Table 5 sweep: lambda_table.md).
        suffix = "" if record.lam == PRIMARY_LAMBDA else f" (lambda {record.lam:g})"
        for r in table.iter_rows(named=True):
            method = table_method(str(r["router_key"]), str(r["prediction_rule"]))
            if method is not None:
                row = {"run": record.name, **record.setting, "method": method + suffix}
                rows.append(row | {"accuracy": 100.0 * r["accuracy"]})
    rows += [row for record in records if (row := _feddrm_row(record)) is not None]
    return pl.DataFrame(rows)


def edgedrm_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean, sample SD and seed count per (graph, method, dataset, partition, clients)."""
    return (
        rows.group_by("graph", "method", "dataset", "partition", "clients")
        .agg(
            pl.col("accuracy").mean().alias("mean"),
            pl.col("accuracy").std(ddof=1).alias("sd"),
            pl.col("seed").n_unique().alias("seeds"),
        )
        .sort("graph", "method", "dataset", "partition", "clients")
    )


Setting = tuple[str, str, int]  # (dataset, partition, clients)
Cells = dict[tuple[str, str, Setting], tuple[float, float | None]]


def _cells(table: pl.DataFrame) -> Cells:
    """``{(graph, method, (dataset, partition, clients)): (mean, sd)}``."""
    return {
        (r["graph"], r["method"], (r["dataset"], r["partition"], int(r["clients"]))): (r["mean"], r["sd"])
        for r in table.iter_rows(named=True)
    }


def _label(setting: Setting, settings: set[Setting]) -> str:
    dataset, partition, clients = setting
    mixed = len({c for *_, c in settings}) > 1
    return f"{dataset} {partition}" + (f" ({clients} clients)" if mixed else "")


def _render(cell: Cells, best: dict[tuple[str, Setting], float], g: str, m: str, st: Setting) -> str:
    """``mean ± sd`` of one cell, bold when it is the best decentralized one; ``-`` when absent. A
    method of the reference group (no graph: FedDRM) shows its setting's value in every graph."""
    if (g, m, st) not in cell:
        g = REFERENCE_GROUP
    if (g, m, st) not in cell:
        return "-"
    mean, sd = cell[(g, m, st)]
    text = f"{mean:.2f} ± {sd:.2f}" if sd is not None else f"{mean:.2f}"
    return f"**{text}**" if m not in REFERENCE_METHODS and mean == best[(g, st)] else text


def _best(cells: Cells) -> dict[tuple[str, Setting], float]:
    """Best decentralized mean per (graph, setting)."""
    best: dict[tuple[str, Setting], float] = {}
    for (g, m, st), (mu, _) in cells.items():
        if m not in REFERENCE_METHODS:
            best[(g, st)] = max(best.get((g, st), float("-inf")), mu)
    return best


def _methods(names: set[str]) -> list[str]:
    return [m for m in _ORDER if m in names] + sorted(names - set(_ORDER))


def edgedrm_markdown(table: pl.DataFrame) -> str:
    """The paper's Table 1 layout: graph/method rows, dataset/partition columns, best decentralized bold."""
    if table.height == 0:
        return ""
    cell = _cells(table)
    settings = {st for *_, st in cell}
    columns = sorted(settings)
    best = _best(cell)
    rows = [
        [g, m, *(_render(cell, best, g, m, st) for st in columns)]
        for g in sorted({g for g, *_ in cell}, key=graph_order)
        for m in _methods({k[1] for k in cell if k[0] == g})
    ]
    return markdown_table(["graph", "method", *(_label(st, settings) for st in columns)], rows)


def edgedrm_settings_markdown(table: pl.DataFrame) -> str:
    """The paper's Table 2 layout: one row per (graph, setting), one column per method, best bold.

    The reference group's methods (FedDRM) fill their column in every graph row of their setting; the
    reference group gets a row of its own only for a setting no graph has."""
    if table.height == 0:
        return ""
    cell = _cells(table)
    settings = {st for *_, st in cell}
    methods = _methods({m for _, m, _ in cell})
    best = _best(cell)
    graphed = {st for g, _, st in cell if g != REFERENCE_GROUP}
    rows = []
    for g in sorted({g for g, *_ in cell}, key=graph_order):
        own = {st for gg, _, st in cell if gg == g}
        for st in sorted(own - graphed if g == REFERENCE_GROUP else own):
            rows.append([g, _label(st, settings), *(_render(cell, best, g, m, st) for m in methods)])
    return markdown_table(["graph", "setting", *methods], rows)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def edgedrm_margins(table: pl.DataFrame) -> pl.DataFrame:
    """Per graph, over the settings that have EdgeDRM and another decentralized method (paper Sec. 5.2):

    - ``settings``; ``edgedrm_first``: settings where EdgeDRM's mean is the best decentralized one;
    - ``margin``: mean over settings of EdgeDRM minus the strongest *other* decentralized method;
    - ``vs_dfedavgm``: mean of EdgeDRM minus DFedAvgM (the paper: near 0 on the complete graph);
    - ``referral_gain``: mean of EdgeDRM minus EdgeDRM-NR (the paper: positive everywhere).
    """
    cell = _cells(table)
    rows = []
    for g in sorted({g for g, *_ in cell}, key=graph_order):
        first, margins, vs_d, gains = 0, [], [], []
        for st in sorted({st for gg, m, st in cell if gg == g and m == "EdgeDRM"}):
            ours = cell[(g, "EdgeDRM", st)][0]
            others = [
                mu
                for (gg, m, s2), (mu, _) in cell.items()
                if gg == g and s2 == st and m not in (*REFERENCE_METHODS, "EdgeDRM")
            ]
            if not others:
                continue
            margins.append(ours - max(others))
            first += ours >= max(others)
            if (g, "DFedAvgM", st) in cell:
                vs_d.append(ours - cell[(g, "DFedAvgM", st)][0])
            if (g, "EdgeDRM-NR", st) in cell:
                gains.append(ours - cell[(g, "EdgeDRM-NR", st)][0])

        if margins:
            rows.append(
                {
                    "graph": g,
                    "settings": len(margins),
                    "edgedrm_first": first,
                    "margin": _mean(margins),
                    "vs_dfedavgm": _mean(vs_d),
                    "referral_gain": _mean(gains),
                }
            )
    return pl.DataFrame(rows)


def edgedrm_margins_markdown(margins: pl.DataFrame) -> str:
    """:func:`edgedrm_margins` as a markdown table (percentage points)."""
    if margins.height == 0:
        return ""

    def pp(v: float | None) -> str:
        return "-" if v is None else f"{v:+.2f}"

    header = ["graph", "EdgeDRM best / settings", "margin over best other (pp)", "vs DFedAvgM (pp)"]
    rows = [
        [
            r["graph"],
            f"{r['edgedrm_first']} / {r['settings']}",
            *map(pp, (r["margin"], r["vs_dfedavgm"])),
            pp(r["referral_gain"]),
        ]
        for r in margins.iter_rows(named=True)
    ]
    return markdown_table([*header, "referral gain over NR (pp)"], rows)


def _table_with_margins(rows: pl.DataFrame) -> str:
    table = edgedrm_table(rows)
    text, margins = edgedrm_markdown(table), edgedrm_margins_markdown(edgedrm_margins(table))
    return text + (
        "\nEdgeDRM against the other decentralized methods, per graph:\n\n" + margins if margins else ""
    )


#: ``edgedrm_table.md``: the paper's Table 1 layout, then EdgeDRM's margins per graph.
TABLE_SPEC = TableSpec(
    "edgedrm_table.md",
    edgedrm_rows,
    _table_with_margins,
    "EdgeDRM Table 1: graph x method rows, dataset x partition columns, mean ± SD, best decentralized bold",
    gate="edgedrm",
)
#: ``edgedrm_settings.md``: the paper's Table 2 layout.
SETTINGS_SPEC = TableSpec(
    "edgedrm_settings.md",
    edgedrm_rows,
    lambda rows: edgedrm_settings_markdown(edgedrm_table(rows)),
    "EdgeDRM Table 2: one row per graph and setting, one column per method",
    gate="edgedrm",
)
