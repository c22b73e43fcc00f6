"""The EdgeDRM paper's Tables 1 and 2 from referral runs: graph x method rows, dataset x partition columns.

Every EdgeDRM run folder under the root contributes the rows of its ``referral.csv`` (written by
``lightning-fed refer``) that the paper reports, read as methods:

- ``EdgeDRM`` (score-weighted history), ``EdgeDRM-NR``, ``FedDRM`` (the centralized reference,
  weighted history) and ``DFedAvgM`` (the run's stage-I model at the entry client);
- each ``--baselines`` row under its algorithm's name (``LocalOnly`` reads ``Local``; DisPFL and
  FedSPD runs appear under their names) at the entry client.

The run's ``config.yaml`` names the column (dataset: the data class, with the CIFAR variant;
partition: ``5-SPC`` for ``Shards(per_client=5)``, ``Dir-0.3`` for ``DirichletLabels(alpha=0.3)``,
``balanced`` for ``BalancedSizes``) and the group (graph: ``Path``, ``Cycle``, ``RR4``, ``Complete``,
...). Cells are mean +/- sample SD of the accuracy (%) over the seeds found; per graph and column the
best decentralized method (not Local, not FedDRM) is in bold, as in the paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import yaml

__all__ = ["REFERENCE_METHODS", "edgedrm_markdown", "edgedrm_rows", "edgedrm_table", "run_setting"]

#: Methods shown as references, never marked best (the paper's "Reference" group).
REFERENCE_METHODS = ("Local", "FedDRM")
_ORDER = ("Local", "FedDRM", "DFedAvgM", "DisPFL", "FedSPD", "EdgeDRM-NR", "EdgeDRM")
_ROUTER_METHODS = {
    ("EdgeDRM", "weighted history"): "EdgeDRM",
    ("EdgeDRM-NR", "hard terminal"): "EdgeDRM-NR",
    ("FedDRM (centralized)", "weighted history"): "FedDRM",
    ("DFedAvgM (stage I)", "hard terminal"): "DFedAvgM",
}


def _class_name(node: Any) -> str:
    return str(node.get("class_path", "")).rsplit(".", 1)[-1] if isinstance(node, dict) else ""


def run_setting(config: dict[str, Any]) -> dict[str, Any]:
    """``dataset``, ``partition``, ``graph``, ``seed`` of a run from its resolved config."""
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
    graph = _class_name(topo) or "RandomRegular"
    if graph == "RandomRegular":
        graph = f"RR{((topo.get('init_args') or {}) if isinstance(topo, dict) else {}).get('degree', 4)}"
    return {"dataset": dataset, "partition": partition, "graph": graph, "seed": config.get("seed")}


def _method(router: str, rule: str) -> str | None:
    if (router, rule) in _ROUTER_METHODS:
        return _ROUTER_METHODS[(router, rule)]
    ours = router.startswith(("EdgeDRM", "FedDRM", "DFedAvgM"))
    if " (" in router and rule == "hard terminal" and not ours:
        name = router.split(" (", 1)[0]
        return "Local" if name == "LocalOnly" else name
    return None


def edgedrm_rows(root: Path) -> pl.DataFrame:
    """One row per (run, method): setting columns and ``accuracy`` (%), from every referral run."""
    rows = []
    for path in sorted(Path(root).rglob("referral.csv")):
        run = path.parent
        if not (run / "summary.json").is_file() or not (run / "config.yaml").is_file():
            continue
        setting = run_setting(yaml.safe_load((run / "config.yaml").read_text()) or {})
        for r in pl.read_csv(path).iter_rows(named=True):
            method = _method(str(r["router"]), str(r["prediction_rule"]))
            if method is not None:
                rows.append({"run": run.name, **setting, "method": method, "accuracy": 100.0 * r["accuracy"]})
    return pl.DataFrame(rows)


def edgedrm_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean, sample SD and seed count per (graph, method, dataset, partition)."""
    return (
        rows.group_by("graph", "method", "dataset", "partition")
        .agg(
            pl.col("accuracy").mean().alias("mean"),
            pl.col("accuracy").std(ddof=1).alias("sd"),
            pl.col("seed").n_unique().alias("seeds"),
        )
        .sort("graph", "method", "dataset", "partition")
    )


def _graph_order(graph: str) -> tuple[int, str]:
    """Sparse to dense, as the paper lists them: Path, Cycle, RR-k, Complete, then the rest."""
    rank = {"Path": 0, "Cycle": 1, "Complete": 3}.get(graph, 2 if graph.startswith("RR") else 4)
    return rank, graph


def edgedrm_markdown(table: pl.DataFrame) -> str:
    """The table laid out like the paper's: graph/method rows, dataset/partition columns, best bold."""
    if table.height == 0:
        return ""
    columns = sorted({(d, p) for d, p in table.select("dataset", "partition").iter_rows()})
    cell = {(g, m, d, p): (mu, sd) for g, m, d, p, mu, sd, _ in table.iter_rows()}
    best: dict[tuple[str, str, str], float] = {}
    for (g, m, d, p), (mu, _) in cell.items():
        if m not in REFERENCE_METHODS:
            best[(g, d, p)] = max(best.get((g, d, p), float("-inf")), mu)
    lines = [
        "| graph | method | " + " | ".join(f"{d} {p}" for d, p in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    graphs = sorted({g for g, *_ in cell}, key=_graph_order)
    for g in graphs:
        methods = [m for m in _ORDER if any(k[0] == g and k[1] == m for k in cell)]
        methods += sorted({k[1] for k in cell if k[0] == g} - set(methods))
        for m in methods:
            out = []
            for d, p in columns:
                if (g, m, d, p) not in cell:
                    out.append("-")
                    continue
                mu, sd = cell[(g, m, d, p)]
                text = f"{mu:.2f} ± {sd:.2f}" if sd is not None else f"{mu:.2f}"
                bold = m not in REFERENCE_METHODS and mu == best.get((g, d, p))
                out.append(f"**{text}**" if bold else text)
            lines.append(f"| {g} | {m} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"
