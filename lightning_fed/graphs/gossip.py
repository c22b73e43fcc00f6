"""What the graph methods share: the built graph, its directed edges and per-receiver softmax.

Decentralized methods on a fixed graph (DeceFL, DFedAvgM, EdgeDRM, DeFTA, DisPFL, FedSPD) and the
:class:`~lightning_fed.selection.GraphNeighbours` partner selector build their graph once from the
run seed (:func:`build_graph`: connected, errors naming the config key) and exchange models only
along its edges: :func:`directed_edges` gives both directions of every edge whose two ends are
available, one message per directed edge. Sending, validating and dropping the rejected is the one
exchange path of :func:`lightning_fed.comm.exchange.exchange`; mixing what arrived is
:func:`lightning_fed.aggregation.mixing.mix_received` (docs/architecture.md, decisions 2 and 9).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.graphs.topology import Graph, Topology

__all__ = ["build_graph", "directed_edges", "graph_stats", "segment_softmax"]


def build_graph(topology: Topology, num_centers: int, seed: int, key: str = "algorithm.topology") -> Graph:
    """``topology`` built on the federation, with errors naming the config ``key``.

    Raises:
        ValueError: If the topology cannot be built on ``num_centers`` nodes or is disconnected.
    """
    try:
        graph = topology.build(num_centers, seed)
    except ValueError as err:
        raise ValueError(f"{key}={topology!r} on data.num_centers={num_centers}: {err}") from err
    if not graph.is_connected:
        raise ValueError(
            f"{key}={topology!r} is disconnected on {num_centers} centers: decentralized "
            "averaging needs a connected graph; add edges or choose another topology"
        )
    return graph


def graph_stats(graph: Graph) -> dict[str, float]:
    """Run-summary scalars of a connected communication graph: edges, mean degree, diameter."""
    info = graph.describe()
    return {
        "graph_edges": float(info["num_edges"]),
        "graph_mean_degree": float(info["mean_degree"]),
        "graph_diameter": float(info["diameter"]),
    }


def directed_edges(graph: Graph, available: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Both directions of every edge whose two ends are available: ``(src, dst)``, int64 ``[2E']``."""
    e = graph.edges
    src, dst = torch.cat([e[:, 0], e[:, 1]]), torch.cat([e[:, 1], e[:, 0]])
    if available is not None:
        keep = available[src] & available[dst]
        src, dst = src[keep], dst[keep]
    return src, dst


def segment_softmax(logits: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """Softmax of ``logits`` within each group: ``exp(l_t) / sum_{s: group_s = group_t} exp(l_s)``.

    Stable (the group maximum is subtracted first); float64.
    """
    logits = logits.to(torch.float64)
    top = torch.full((num_groups,), -torch.inf, dtype=torch.float64)
    top = top.scatter_reduce(0, group, logits, reduce="amax", include_self=True)
    e = (logits - top[group]).exp()
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, group, e)
    return e / total[group]
