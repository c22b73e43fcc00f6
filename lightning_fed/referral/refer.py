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
Written atomically as ``referral.csv`` and ``referral.md``, plus ``referral_traffic.png`` (the first
router's traffic on the graph).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch
from torch import Tensor, nn

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.data.center import FederatedData
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
from lightning_fed.render import frame_markdown, write_pair
from lightning_fed.seeding import torch_generator

__all__ = [
    "default_routers",
    "draw_entries",
    "refer",
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


def refer(
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
) -> pl.DataFrame:
    """Evaluate referral on the queries and write the table and the routing picture.

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

    Returns:
        The table (also written as ``referral.csv`` / ``referral.md`` in ``run_dir``).

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
    rows = []
    for k, router in enumerate(routers):
        name = router.label
        if isinstance(router, OracleSourceRouter) and router.head is None:
            router.fit([experts.encode(u, cd.x_train) for u, cd in enumerate(data.centers)])
        routes = router.route(x, entry, setup)
        work = workload(routes, c, tiers) | source_columns(routes, q, reach)
        if k == 0 and write:
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
            rows.append(
                {
                    "router": name,
                    "prediction_rule": rule.label or type(rule).__name__,
                    "accuracy": float((pred == y).to(torch.float64).mean()),
                    "balanced_accuracy": float(balanced_accuracy(pred, y, max(num_classes, 2))),
                    **work,
                    "queries": q.label,
                    "router_key": router.key,
                }
            )
    table = pl.DataFrame(rows)
    if write:
        write_referral(table, run_dir)
    return table


def write_referral(table: pl.DataFrame, out: str | Path) -> tuple[Path, Path]:
    """Write ``referral.csv`` and ``referral.md`` (every column, :func:`~lightning_fed.render.frame_markdown`)
    into ``out`` atomically; returns their paths (CSV first)."""
    md, csv = write_pair(frame_markdown(table), table, Path(out) / "referral")
    return csv, md
