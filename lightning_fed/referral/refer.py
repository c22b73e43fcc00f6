"""Referral evaluation: every router and prediction rule on the same models and queries (EdgeDRM Sec. 5).

Queries are by default the clients' test rows (:func:`split_queries`). Each query from source ``s``
enters at a client drawn uniformly among the other ``C - 1`` clients (``(seed, "referral_entry")``,
App. D.1: the source id builds the evaluation but is never shown to a router or rule). The hospital-
tier experiment passes a fixed panel instead (:class:`lightning_fed.referral.panel.QueryPanel`: common
untransformed test images, each in several arrival records, exactly balanced entries). The ISIC2019
protocol (App. D.3) evaluates every test image at every client instead
(:func:`lightning_fed.referral.panel.every_entry_queries`, ``refer --queries every-entry``); the
table's balanced accuracy is then the paper's pooled BA over (image, entry) pairs. Every router
walks the same queries from the same entries; every prediction rule reads the same walks. One row per
(router, rule): accuracy, balanced accuracy, calls and incident scores per query, the workload columns
of :func:`lightning_fed.referral.workload.workload`, with test queries the source diagnostics of
:func:`source_columns` (``source_reached``: % of walks that visit the query's source client;
``source_in_reach``: % of queries whose source lies within ``L`` moves of the entry) and ``queries``
(``test``, ``every entry`` or ``panel NxR``), and last ``router_key`` (the router's stable
:attr:`~lightning_fed.referral.routers.Router.key`, what the report tables select routers by).
Written atomically as ``referral.csv`` (fractions, every column: what the report reads),
``referral.md`` (a header naming the run, graph, seed, ``L``, ``eta`` and queries; accuracies in %;
the headline row marked; rows that every prediction rule gives alike, such as EdgeDRM-NR's, shown
once; a legend: :func:`referral_markdown`), ``referral_queries.parquet`` (one row per query, router
and rule: entry, source, path, label, prediction, correct: :func:`query_frame`; its mean ``correct``
per router and rule is the table's ``accuracy``) and ``referral_traffic.png`` (the first router's
traffic on the graph).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch
from torch import Tensor, nn

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.data.center import FederatedData
from lightning_fed.io import atomic_path
from lightning_fed.metrics.balanced_accuracy import balanced_accuracy
from lightning_fed.plots.referral import routing_picture
from lightning_fed.referral.panel import Queries
from lightning_fed.referral.prediction import HardTerminal, PredictionRule, UniformHistory, WeightedHistory
from lightning_fed.referral.routers import (
    CountOnlyRouter,
    EdgeDRMRouter,
    NoReferral,
    OracleSourceRouter,
    RandomRouter,
    Router,
    RouteSetup,
)
from lightning_fed.referral.workload import client_calls, edge_traffic, workload
from lightning_fed.render import frame_markdown, markdown_table, number, write_pair
from lightning_fed.seeding import torch_generator

__all__ = [
    "HEADLINE",
    "Referral",
    "default_routers",
    "draw_entries",
    "query_frame",
    "refer",
    "refer_frames",
    "referral_header",
    "referral_markdown",
    "source_columns",
    "split_queries",
    "to_markdown",
    "within_hops",
    "write_referral",
]


def default_routers() -> list[Router]:
    """The six routers in table order (EdgeDRM first: its traffic is the routing picture):
    EdgeDRM, EdgeDRM w/o prior, count-only, random, EdgeDRM-NR, oracle router on EdgeDRM experts."""
    return [
        EdgeDRMRouter(),
        EdgeDRMRouter(prior=False),
        CountOnlyRouter(),
        RandomRouter(),
        NoReferral(),
        OracleSourceRouter(),
    ]


def draw_entries(source: Tensor, num_clients: int, seed: int) -> Tensor:
    """Entry client per query, uniform over the clients other than its source ``[Q]``.

    Raises:
        ValueError: With fewer than two clients (no non-source entry exists).
    """
    if num_clients < 2:
        raise ValueError("referral needs at least 2 clients (queries enter at a non-source client)")
    gen = torch_generator(seed, "referral_entry")
    offset = torch.randint(1, num_clients, source.shape, generator=gen)
    return (source.to(torch.int64) + offset) % num_clients


def split_queries(data: FederatedData, seed: int) -> Queries:
    """Every client's test rows, each entering at a non-source client (:func:`draw_entries`)."""
    x = torch.cat([cd.x_test for cd in data.centers])
    y = torch.cat([cd.y_test for cd in data.centers]).to(torch.int64)
    source = torch.cat([torch.full((cd.x_test.shape[0],), u) for u, cd in enumerate(data.centers)])
    return Queries(x, y, draw_entries(source, data.num_centers, seed), "test", source=source.to(torch.int64))


def within_hops(adjacency: Tensor, max_hops: int) -> Tensor:
    """Bool ``[C, C]``: ``j`` lies at most ``max_hops`` moves from ``i`` on the graph (``i`` itself
    included), by ``R_0 = I``, ``R_k = R_{k-1} | (R_{k-1} A)``."""
    a = adjacency.to(torch.bool)
    reach = torch.eye(a.shape[0], dtype=torch.bool)
    for _ in range(int(max_hops)):
        reach = reach | (reach.to(torch.float32) @ a.to(torch.float32)).gt(0)
    return reach


def source_columns(routes: Any, q: Queries, reach: Tensor) -> dict[str, float]:
    """The mechanism diagnostics of one router's walks when the queries have sources (else ``{}``):

    - ``source_reached``: % of queries whose walk visits their source client (EdgeDRM's premise:
      the source's expert answers its own distribution best; Sec. 3);
    - ``source_in_reach``: % of queries whose source lies within ``L`` moves of the entry, the
      ceiling of ``source_reached`` for any router that moves along edges (a property of the graph
      and the entries, the same for every router).
    """
    if q.source is None:
        return {}
    source = q.source.to(routes.visited.device)
    hit = (routes.visited == source.unsqueeze(1)).any(1)
    in_reach = reach[q.entry.to(torch.int64), q.source.to(torch.int64)]
    return {
        "source_reached": 100.0 * float(hit.to(torch.float64).mean()),
        "source_in_reach": 100.0 * float(in_reach.to(torch.float64).mean()),
    }


#: A markdown table of every column (floats with 4 significant digits); an alias kept for one release
#: of :func:`lightning_fed.render.frame_markdown`, the package's one renderer.
to_markdown = frame_markdown


#: The table's headline row (the paper's EdgeDRM: potentials with the count prior, weighted history).
HEADLINE = ("EdgeDRM", "weighted history")


@dataclass(frozen=True)
class Referral:
    """What :func:`refer_frames` evaluates: the table and its per-query rows.

    Attributes:
        table: One row per (router, prediction rule) (the columns of :func:`refer`).
        queries: One row per (query, router, rule) (:func:`query_frame`).
    """

    table: pl.DataFrame
    queries: pl.DataFrame


def query_frame(router: Router, rule: str, q: Queries, routes: Any, pred: Tensor) -> pl.DataFrame:
    """One row per query of one (router, rule): what a paired comparison of routers reads.

    Columns: ``query`` (its position among the queries: the pairing key across routers),
    ``router``, ``router_key``, ``prediction_rule``, ``entry``, ``source`` (null for panel
    records), ``path`` (the visited clients, entry first), ``calls``, ``label``, ``prediction`` and
    ``correct``. The mean of ``correct`` per (router, rule) is the table's ``accuracy``.
    """
    n = int(routes.visited.shape[0])
    paths = [[c for c in row if c >= 0] for row in routes.visited.cpu().tolist()]
    label = q.y.to(torch.int64).cpu()
    source = q.source.to(torch.int64).cpu().tolist() if q.source is not None else [None] * n
    return pl.DataFrame(
        {
            "query": pl.Series(range(n), dtype=pl.Int64),
            "router": [router.label] * n,
            "router_key": [router.key] * n,
            "prediction_rule": [rule] * n,
            "entry": pl.Series(q.entry.to(torch.int64).cpu().tolist(), dtype=pl.Int64),
            "source": pl.Series(source, dtype=pl.Int64),
            "path": pl.Series(paths, dtype=pl.List(pl.Int64)),
            "calls": pl.Series(routes.calls.cpu().tolist(), dtype=pl.Int64),
            "label": pl.Series(label.tolist(), dtype=pl.Int64),
            "prediction": pl.Series(pred.to(torch.int64).tolist(), dtype=pl.Int64),
            "correct": pl.Series((pred == label).tolist(), dtype=pl.Boolean),
        }
    )


def refer_frames(
    run_dir: str | Path,
    module: nn.Module,
    params: dict[str, Tensor],
    data: FederatedData,
    graph: Any,
    potentials: Potentials,
    seed: int,
    max_hops: int = 2,
    eta: float = 0.0,
    routers: Sequence[Router] | None = None,
    rules: Sequence[PredictionRule] | None = None,
    batch_size: int = 1024,
    device: torch.device | None = None,
    write: bool = True,
    queries: Queries | None = None,
    picture: bool | None = None,
) -> Referral:
    """Evaluate referral on the queries: the table and its per-query rows; write them and the
    routing picture (``write``).

    Args:
        run_dir: Output folder.
        module: Model template (``encode`` + linear ``head``).
        params: Final stacked per-client parameters (stage II heads).
        data: The federation (its test splits are the default queries; its train splits feed only the
            oracle router on EdgeDRM experts).
        graph: The communication graph (``adjacency [C, C]``, ``tiers``).
        potentials: Fitted potentials and counts (``EdgeDRM.state_dict()`` restores them).
        seed: Run seed (entries, random router).
        max_hops: Movement budget ``L``.
        eta: Move threshold.
        routers: The routers, one block of rows each under its :attr:`~Router.label` (labels must
            differ); default :func:`default_routers`. The first one's traffic is the routing picture.
        rules: Prediction rules; default hard terminal, uniform and weighted history.
        batch_size: Rows per encoder call.
        device: Compute device.
        write: Write the table and the routing picture (False: only return the table, e.g. for
            baseline rows that a caller merges into one table with :func:`write_referral`).
        queries: The queries and their entry clients (default :func:`split_queries`; a
            :meth:`~lightning_fed.referral.panel.QueryPanel.queries` panel for the tier experiment).
        picture: Draw ``referral_traffic.png`` (None: when ``write``), e.g. for a caller that
            writes a merged table itself.

    Returns:
        The table and the per-query rows (also written as ``referral.csv`` / ``referral.md`` /
        ``referral_queries.parquet`` in ``run_dir``).

    Raises:
        ValueError: If the graph or potentials do not fit the data, no router is given, two
            routers share a label, or an entry client is not one of the data's.
    """
    c = data.num_centers
    adjacency = torch.as_tensor(graph.adjacency).to(torch.bool)
    if adjacency.shape != (c, c) or potentials.num_clients != c:
        raise ValueError(f"refer: graph/potentials are for a different number of clients than the data ({c})")
    routers = list(routers) if routers is not None else default_routers()
    if not routers:
        raise ValueError("refer: no routers given")
    labels = [router.label for router in routers]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(
            f"refer: two routers share the label {twice[0]!r}; give one another label "
            "(init_args: {label: ...})"
        )
    rules = list(rules) if rules is not None else [HardTerminal(), UniformHistory(), WeightedHistory()]
    experts = Experts(module, params, batch_size=batch_size, device=device)
    setup = RouteSetup(adjacency, potentials, experts, max_hops=max_hops, eta=eta, seed=seed)
    q = queries if queries is not None else split_queries(data, seed)
    x, y, entry = q.x, q.y.to(torch.int64), q.entry.to(torch.int64)
    if entry.numel() and not (int(entry.min()) >= 0 and int(entry.max()) < c):
        raise ValueError(f"refer: entry clients must lie in 0..{c - 1}")
    tiers = getattr(graph, "tiers", None)
    reach = within_hops(adjacency.cpu(), max_hops)
    rows, per_query = [], []
    for k, router in enumerate(routers):
        name = router.label
        if isinstance(router, OracleSourceRouter) and router.head is None:
            router.fit([experts.encode(u, cd.x_train) for u, cd in enumerate(data.centers)])
        routes = router.route(x, entry, setup)
        work = workload(routes, c, tiers) | source_columns(routes, q, reach)
        if k == 0 and (write if picture is None else picture):
            routing_picture(
                adjacency,
                client_calls(routes, c),
                edge_traffic(routes, c),
                Path(run_dir) / "referral_traffic.png",
                tiers,
                title=f"{name} referral traffic (L={max_hops}, eta={eta:g})",
            )
        num_classes = routes.logits.shape[2]
        for rule in rules:
            pred = rule.predict(routes).cpu()
            rule_label = rule.label or type(rule).__name__
            per_query.append(query_frame(router, rule_label, q, routes, pred))
            rows.append(
                {
                    "router": name,
                    "prediction_rule": rule_label,
                    "accuracy": float((pred == y).to(torch.float64).mean()),
                    "balanced_accuracy": float(balanced_accuracy(pred, y, max(num_classes, 2))),
                    **work,
                    "queries": q.label,
                    "router_key": router.key,
                }
            )
    result = Referral(pl.DataFrame(rows), pl.concat(per_query, how="vertical"))
    if write:
        header = referral_header(Path(run_dir).name, graph, seed, max_hops, eta, q)
        write_referral(result.table, run_dir, queries=result.queries, header=header)
    return result


def refer(*args: Any, **kwargs: Any) -> pl.DataFrame:
    """The referral table of :func:`refer_frames` (the same arguments); with ``write`` (the
    default), the table, its per-query rows and the routing picture are written to ``run_dir``."""
    return refer_frames(*args, **kwargs).table


def referral_header(
    run: str,
    graph: Any,
    seed: int,
    max_hops: int,
    eta: float,
    queries: Queries,
    graph_name: str | None = None,
) -> dict[str, str]:
    """What ``referral.md`` states above its table: the run, the graph (``graph_name``, e.g. the
    topology's report key, else the graph's class; clients, edges), the seed, ``L``, ``eta`` and
    the queries (kind and count)."""
    adjacency = torch.as_tensor(graph.adjacency).to(torch.bool)
    clients, edges = int(adjacency.shape[0]), int(adjacency.triu(1).sum())
    name = graph_name or type(graph).__name__
    return {
        "run": run,
        "graph": f"{name} ({clients} clients, {edges} edges)",
        "seed": str(seed),
        "L (max hops)": str(max_hops),
        "eta (move threshold)": f"{eta:g}",
        "queries": f"{queries.label} ({int(queries.y.shape[0])})",
    }


#: Columns that ``referral.md`` shows in % (``referral.csv`` keeps the fractions).
_PERCENT = ("accuracy", "balanced_accuracy")
#: What each column means: the legend under ``referral.md``.
_LEGEND = {
    "accuracy": "share of queries answered right (%)",
    "balanced_accuracy": "mean per-class recall (%)",
    "calls_per_query": "classifier calls per query (1 + moves)",
    "incident_per_query": "routing scores evaluated per query",
    "peak_share": "share of all calls made at the busiest client (%; a uniform load is 100 / clients)",
    "source_reached": "% of walks that visit the query's source client",
    "source_in_reach": "% of queries whose source lies within L moves of the entry (every router's ceiling)",
    "queries": "the query set",
}
#: Columns left to ``referral.csv``: the stable key, and the tier columns of a graph without tiers
#: (``share_all`` is 100 and ``calls_per_100_all`` is 100 x ``calls_per_query``).
_CSV_ONLY = ("router_key", "share_all", "calls_per_100_all")


def _collapsed(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with a router's rows merged into one where its walks never move
    (``calls_per_query == 1``: the entry client alone answers, so every prediction rule gives the
    same prediction), its rule then ``any``; the other rows as they are, in order."""
    keys = [c for c in ("run", "router") if c in table.columns]
    parts = []
    for part in table.partition_by(keys, maintain_order=True):
        if part.height > 1 and (part["calls_per_query"] == 1).all():
            part = part.head(1).with_columns(pl.lit("any").alias("prediction_rule"))
        parts.append(part)
    return pl.concat(parts, how="vertical")


def referral_markdown(table: pl.DataFrame, header: Mapping[str, str] | None = None) -> str:
    """``referral.md``: the header (:func:`referral_header`), the table, then its legend.

    Accuracies are in %; the headline row (:data:`HEADLINE`, by ``router_key``) is marked ``*``;
    rows that every rule gives alike are shown once (:func:`_collapsed`); the columns of
    ``_CSV_ONLY`` are left to ``referral.csv``.
    """
    shown = _collapsed(table)
    columns = [c for c in shown.columns if c not in _CSV_ONLY]
    key = "router_key" if "router_key" in shown.columns else "router"
    head = ["", *(f"{c} (%)" if c in _PERCENT else c for c in columns)]
    rows = []
    for r in shown.iter_rows(named=True):
        cells = ["*" if (r[key], r["prediction_rule"]) == HEADLINE else ""]
        for c in columns:
            v = r[c]
            if c in _PERCENT:
                cells.append(number(None if v is None else 100 * v, ".1f"))
            else:
                cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        rows.append(cells)
    notes = [
        "`*`: the headline row (EdgeDRM, weighted history); `any`: walks that never move, so every "
        "prediction rule gives the row."
    ]
    notes += [f"`{c}`: {_LEGEND[c]}." for c in columns if c in _LEGEND]
    notes.append(
        "`referral.csv` holds every column (accuracies as fractions); each run folder's "
        "`referral_queries.parquet` one row per query, router and rule."
    )
    prefix = ""
    if header:
        title = [f"# Referral: {header['run']}", ""] if "run" in header else []
        facts = " · ".join(f"{k}: {v}" for k, v in header.items() if k != "run")
        prefix = "\n".join([*title, facts, ""]) + "\n"
    legend = "\n".join(f"- {n}" for n in notes)
    return prefix + markdown_table(head, rows, legend)


def write_referral(
    table: pl.DataFrame,
    out: str | Path,
    queries: pl.DataFrame | None = None,
    header: Mapping[str, str] | None = None,
) -> tuple[Path, Path]:
    """Write ``referral.csv`` (every column) and ``referral.md`` (:func:`referral_markdown` under
    ``header``) into ``out`` atomically, and ``referral_queries.parquet`` when given the per-query
    rows; returns the CSV and markdown paths."""
    md, csv = write_pair(referral_markdown(table, header), table, Path(out) / "referral")
    if queries is not None:
        with atomic_path(Path(out) / "referral_queries.parquet") as tmp:
            queries.write_parquet(tmp)
    return csv, md
