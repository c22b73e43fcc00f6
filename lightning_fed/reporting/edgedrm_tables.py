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

The run's ``config.yaml`` names the column (dataset: the data class, with the CIFAR variant;
partition: ``5-SPC`` for ``Shards(per_client=5)``, ``Dir-0.3`` for ``DirichletLabels(alpha=0.3)``,
``balanced`` for ``BalancedSizes``) and the group (graph: ``Path``, ``Cycle``, ``RR4``, ``Complete``,
...; a topology's ``name`` when it has one, e.g. the fixed RR4 ``EdgeList(name="RR4")``) and the
client count (a column label carries ``32 clients`` only when client counts differ).
Cells are mean +/- sample SD of the accuracy (%) over the seeds found; per graph and column the best
decentralized method (not Local, FedDRM or the oracle router) is in bold, as in the paper.

:func:`edgedrm_settings_markdown` lays the same cells out like Table 2 (one row per graph and setting,
one column per method) and :func:`edgedrm_margins` condenses them into the comparisons the paper's
Sec. 5.2 makes: in how many settings EdgeDRM is the best decentralized method, its mean margin over
the strongest other one, its gap to DFedAvgM and its referral gain over EdgeDRM-NR, per graph.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from lightning_fed.reporting.referral import referral_runs

__all__ = [
    "FEDDRM_KEY",
    "PRIMARY_LAMBDA",
    "REFERENCE_GROUP",
    "REFERENCE_METHODS",
    "edgedrm_margins",
    "edgedrm_margins_markdown",
    "edgedrm_markdown",
    "edgedrm_rows",
    "edgedrm_settings_markdown",
    "edgedrm_table",
    "graph_order",
    "run_lambda",
    "run_setting",
    "table_method",
]

#: Methods shown as references, never marked best (the paper's "Reference" group, and the oracle).
REFERENCE_METHODS = ("Local", "FedDRM", "Oracle router")
#: The group of methods that have no graph (FedDRM: one number per setting).
REFERENCE_GROUP = "Reference"
_ORDER = ("Local", "FedDRM", "Oracle router", "DFedAvgM", "DisPFL", "FedSPD", "EdgeDRM-NR", "EdgeDRM")
_ROUTER_METHODS = {
    ("EdgeDRM", "weighted history"): "EdgeDRM",
    ("EdgeDRM-NR", "hard terminal"): "EdgeDRM-NR",
    ("oracle router on EdgeDRM experts", "weighted history"): "Oracle router",
    ("FedDRM (centralized)", "weighted history"): "Oracle router",  # the oracle's label before the rename
    ("DFedAvgM (stage I)", "hard terminal"): "DFedAvgM",
}
#: ``summary.json`` key of a FedDRM run's accuracy (:class:`~lightning_fed.algorithms.FedDRM`).
FEDDRM_KEY = "feddrm_accuracy"


def _class_name(node: Any) -> str:
    return str(node.get("class_path", "")).rsplit(".", 1)[-1] if isinstance(node, dict) else ""


def _tiers_graph(args: dict[str, Any]) -> str:
    """The key of a :class:`~lightning_fed.graphs.HospitalTiers` graph: ``Tiers-layered`` or
    ``Tiers-shortcut`` (its ``shortcut`` flag), with ``small/medium/large`` appended when the tier
    sizes are not the paper's 16/8/8, so two different tier graphs never share a table row."""
    sizes = tuple(int(args.get(k, d)) for k, d in (("small", 16), ("medium", 8), ("large", 8)))
    name = "Tiers-shortcut" if args.get("shortcut") else "Tiers-layered"
    return name if sizes == (16, 8, 8) else f"{name} {'/'.join(map(str, sizes))}"


def run_setting(config: dict[str, Any]) -> dict[str, Any]:
    """``dataset``, ``partition``, ``clients``, ``graph``, ``seed`` of a run from its resolved config."""
    data = config.get("data", {}) or {}
    args = data.get("init_args", {}) or {}
    dataset = _class_name(data)
    if dataset == "CIFAR":
        dataset = f"CIFAR-{args.get('variant', 10)}"
    part = args.get("partition") or {}
    pargs = (part.get("init_args") if isinstance(part, dict) else None) or {}
    partition = {
        "Shards": f"{pargs.get('per_client') or 'default'}-SPC",
        "DirichletLabels": f"Dir-{pargs.get('alpha', 0.3)}",
        "BalancedSizes": "balanced",
    }.get(_class_name(part), _class_name(part) or "default")
    topo = ((config.get("algorithm", {}) or {}).get("init_args", {}) or {}).get("topology") or {}
    targs = (topo.get("init_args") or {}) if isinstance(topo, dict) else {}
    # A named edge list (EdgeList(name="RR4"): the fixed RR4 graphs) reads under its name.
    graph = targs.get("name") or _class_name(topo) or "RandomRegular"
    if graph == "RandomRegular":
        graph = f"RR{targs.get('degree', 4)}"
    elif graph == "HospitalTiers":
        graph = _tiers_graph(targs)
    clients = int(args.get("num_clients") or 8)
    return {
        "dataset": dataset,
        "partition": partition,
        "clients": clients,
        "graph": graph,
        "seed": config.get("seed"),
    }


def table_method(router: str, rule: str) -> str | None:
    """The EdgeDRM tables' method name of a referral-table row (``router``, ``prediction_rule``), or
    None for a row the tables do not show (e.g. EdgeDRM's other prediction rules)."""
    if (router, rule) in _ROUTER_METHODS:
        return _ROUTER_METHODS[(router, rule)]
    ours = router.startswith(("EdgeDRM", "FedDRM", "DFedAvgM", "oracle router"))
    if " (" in router and rule == "hard terminal" and not ours:
        name = router.split(" (", 1)[0]
        return "Local" if name == "LocalOnly" else name
    return None


def _feddrm_row(run: Path) -> dict[str, Any] | None:
    """The FedDRM row of a FedDRM run folder (``summary.json`` with :data:`FEDDRM_KEY`), else None."""
    if not (run / "config.yaml").is_file():
        return None
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    value = summary.get(FEDDRM_KEY) if isinstance(summary, dict) else None
    if not isinstance(value, int | float):
        return None
    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    if _class_name(config.get("algorithm")) != "FedDRM":
        return None
    setting = {**run_setting(config), "graph": REFERENCE_GROUP}
    return {"run": run.name, **setting, "method": "FedDRM", "accuracy": 100.0 * float(value)}


#: EdgeDRM's primary task weight (Sec. 5: lambda = 0.9); the Table 5 sweep varies it.
PRIMARY_LAMBDA = 0.9


def run_lambda(config: dict[str, Any]) -> float:
    """The run's EdgeDRM task weight ``algorithm.init_args.lam`` (the primary 0.9 when not given)."""
    args = (
        ((config.get("algorithm", {}) or {}).get("init_args", {}) or {}) if isinstance(config, dict) else {}
    )
    return float(args.get("lam", PRIMARY_LAMBDA))


def edgedrm_rows(root: Path) -> pl.DataFrame:
    """One row per (run, method): setting columns and ``accuracy`` (%), from every referral run and
    every FedDRM run (module docstring)."""
    rows = []
    for run, config, table in referral_runs(root):
        setting = run_setting(config)
        lam = run_lambda(config)
        # A run off the paper's primary lambda (0.9) is its own method, never pooled with it (the
        # Table 5 sweep: lambda_table.md).
        suffix = "" if lam == PRIMARY_LAMBDA else f" (lambda {lam:g})"
        for r in table.iter_rows(named=True):
            method = table_method(str(r["router"]), str(r["prediction_rule"]))
            if method is not None:
                rows.append(
                    {"run": run.name, **setting, "method": method + suffix, "accuracy": 100.0 * r["accuracy"]}
                )
    for path in sorted(Path(root).rglob("summary.json")):
        row = _feddrm_row(path.parent)
        if row is not None:
            rows.append(row)
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


def graph_order(graph: str) -> tuple[int, str]:
    """The reference group first, then sparse to dense as the paper lists them: Path, Cycle, RR-k,
    Complete, then the rest."""
    fixed = {REFERENCE_GROUP: -1, "Path": 0, "Cycle": 1, "Complete": 3}
    rank = fixed.get(graph, 2 if graph.startswith("RR") else 4)
    return rank, graph


def edgedrm_markdown(table: pl.DataFrame) -> str:
    """The paper's Table 1 layout: graph/method rows, dataset/partition columns, best decentralized bold."""
    if table.height == 0:
        return ""
    cell = _cells(table)
    settings = {st for *_, st in cell}
    columns = sorted(settings)
    best = _best(cell)
    lines = [
        "| graph | method | " + " | ".join(_label(st, settings) for st in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for g in sorted({g for g, *_ in cell}, key=graph_order):
        for m in _methods({k[1] for k in cell if k[0] == g}):
            out = [_render(cell, best, g, m, st) for st in columns]
            lines.append(f"| {g} | {m} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


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
    lines = ["| graph | setting | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for g in sorted({g for g, *_ in cell}, key=graph_order):
        own = {st for gg, _, st in cell if gg == g}
        for st in sorted(own - graphed if g == REFERENCE_GROUP else own):
            out = [_render(cell, best, g, m, st) for m in methods]
            lines.append(f"| {g} | {_label(st, settings)} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


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

    lines = [
        "| graph | EdgeDRM best / settings | margin over best other (pp) | vs DFedAvgM (pp) | "
        "referral gain over NR (pp) |",
        "|---|---|---|---|---|",
    ]
    for r in margins.iter_rows(named=True):
        lines.append(
            f"| {r['graph']} | {r['edgedrm_first']} / {r['settings']} | {pp(r['margin'])} | "
            f"{pp(r['vs_dfedavgm'])} | {pp(r['referral_gain'])} |"
        )
    return "\n".join(lines) + "\n"
