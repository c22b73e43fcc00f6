"""Communication graphs of decentralized federations and their Metropolis mixing weights.

A :class:`Graph` is an undirected simple graph on ``num_nodes`` nodes stored as a canonical edge
list (``i < j``, rows sorted, no duplicates or self-loops). A :class:`Topology` is the configurable
recipe (jsonargparse ``class_path``/``init_args``) that builds one for a federation size and seed:
:class:`Complete`, :class:`Path`, :class:`Cycle`, :class:`RandomRegular` (RR-k), :class:`EdgeList`
and :class:`HospitalTiers` (the layered / shortcut hospital graphs of EdgeDRM App. D.1, Table 4).

:func:`metropolis_weights` gives the symmetric, doubly stochastic gossip matrix
``W_ij = 1 / (1 + max(d_i, d_j))`` on edges and ``W_ii = 1 - sum_{j != i} W_ij`` (Xiao & Boyd 2004),
the mixing matrix of DeceFL (Yuan et al. 2023); :func:`metropolis_self_weights` and
:func:`metropolis_pair_weights` give its diagonal and its edge entries without the ``[n, n]`` matrix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from lightning_fed.seeding import numpy_rng

__all__ = [
    "Complete",
    "Cycle",
    "EdgeList",
    "Graph",
    "HospitalTiers",
    "Path",
    "RandomRegular",
    "Topology",
    "metropolis_pair_weights",
    "metropolis_self_weights",
    "metropolis_weights",
]


@dataclass(frozen=True, eq=False)
class Graph:
    """An undirected simple graph.

    Attributes:
        num_nodes: Number of nodes (>= 1), ids ``0 .. num_nodes - 1``.
        edges: int64 ``[E, 2]``, each row ``i < j``, rows sorted lexicographically, no duplicates.
        tiers: Optional per-node tier label (e.g. ``"small"``/``"medium"``/``"large"`` hospitals).

    Raises:
        ValueError: If the edge list is not canonical or names a node outside the graph
            (use :meth:`from_pairs` to canonicalize an arbitrary pair list).
    """

    num_nodes: int
    edges: Tensor
    tiers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        n, e = int(self.num_nodes), self.edges
        if n < 1:
            raise ValueError(f"Graph.num_nodes must be >= 1, got {self.num_nodes}")
        if not isinstance(e, Tensor) or e.dtype != torch.int64 or e.dim() != 2 or e.shape[1] != 2:
            raise ValueError("Graph.edges must be an int64 tensor of shape [E, 2]")
        if len(e):
            if int(e.min()) < 0 or int(e.max()) >= n:
                raise ValueError(f"Graph.edges names a node outside 0..{n - 1}")
            if bool((e[:, 0] >= e[:, 1]).any()):
                raise ValueError("Graph.edges rows must satisfy i < j (no self-loops; use Graph.from_pairs)")
            key = e[:, 0] * n + e[:, 1]
            if bool((key[1:] <= key[:-1]).any()):
                raise ValueError("Graph.edges rows must be sorted and unique (use Graph.from_pairs)")
        if self.tiers is not None and len(self.tiers) != n:
            raise ValueError(f"Graph.tiers has {len(self.tiers)} labels for {n} nodes")

    @classmethod
    def from_pairs(
        cls, num_nodes: int, pairs: Sequence[Sequence[int]] | Tensor, tiers: tuple[str, ...] | None = None
    ) -> Graph:
        """Canonical graph from unordered node pairs (orientation and duplicates are merged).

        Raises:
            ValueError: On a self-loop.
        """
        e = torch.as_tensor(pairs, dtype=torch.int64).reshape(-1, 2)
        if bool((e[:, 0] == e[:, 1]).any()):
            raise ValueError("a graph edge joins a node to itself (self-loop)")
        e = torch.stack([e.min(1).values, e.max(1).values], 1)
        e = torch.unique(e, dim=0) if len(e) else e  # unique sorts rows lexicographically
        return cls(int(num_nodes), e.contiguous(), tiers)

    @property
    def num_edges(self) -> int:
        """Number of undirected edges ``E``."""
        return int(self.edges.shape[0])

    @cached_property
    def _adj(self) -> Tensor:
        adj = torch.zeros(self.num_nodes, self.num_nodes, dtype=torch.bool)
        adj[self.edges[:, 0], self.edges[:, 1]] = True
        return adj | adj.T

    @property
    def adjacency(self) -> Tensor:
        """Symmetric bool adjacency ``[n, n]`` (False on the diagonal)."""
        return self._adj.clone()

    @property
    def degree(self) -> Tensor:
        """Node degrees, int64 ``[n]`` (counted from the edge list: no ``[n, n]`` matrix)."""
        return torch.bincount(self.edges.reshape(-1), minlength=self.num_nodes)

    @cached_property
    def _neighbour_lists(self) -> tuple[Tensor, Tensor]:
        """Compressed neighbour lists ``(start [n + 1], neighbours [2E])``: node ``i``'s neighbours
        are ``neighbours[start[i]:start[i + 1]]``, ascending."""
        e = self.edges
        src, dst = torch.cat([e[:, 0], e[:, 1]]), torch.cat([e[:, 1], e[:, 0]])
        order = torch.argsort(src * self.num_nodes + dst)
        start = torch.zeros(self.num_nodes + 1, dtype=torch.int64)
        start[1:] = torch.cumsum(torch.bincount(src, minlength=self.num_nodes), 0)
        return start, dst[order]

    def neighbours(self, i: int) -> Tensor:
        """Sorted int64 ids of the neighbours of node ``i``."""
        if not 0 <= int(i) < self.num_nodes:
            raise ValueError(f"node {i} is outside 0..{self.num_nodes - 1}")
        start, neighbours = self._neighbour_lists
        return neighbours[int(start[int(i)]) : int(start[int(i) + 1])].clone()

    def hop_distances(self, sources: Tensor) -> Tensor:
        """BFS hop distances from each of ``sources`` to every node: int64 ``[len(sources), n]``, -1
        where unreachable.

        All sources expand together, each (source, node) pair once, through the neighbour lists:
        ``O(len(sources) E)`` work and ``O(len(sources) n)`` memory, where products of dense
        ``[n, n]`` matrices cost ``O(n^3)`` a hop (a diameter at 10,000 nodes: 81 s and +1.9 GB that
        way, 14 s and +0.3 GB this way).

        Args:
            sources: Node ids, int64 ``[S]``.
        """
        n, b = self.num_nodes, len(sources)
        start, neighbours = self._neighbour_lists
        degree = start[1:] - start[:-1]
        dist = torch.full((b * n,), -1, dtype=torch.int64)  # flat: pair (row, node) at row * n + node
        frontier = torch.arange(b) * n + sources.to(torch.int64)
        dist[frontier] = 0
        mark = torch.zeros(b * n, dtype=torch.bool)  # this hop's newly reached pairs, deduplicated
        hop = 0
        while len(frontier):
            hop += 1
            row, node = frontier // n, frontier % n
            count = degree[node]
            first = torch.repeat_interleave(start[node] - torch.cumsum(count, 0) + count, count)
            reach = neighbours[first + torch.arange(len(first))] + torch.repeat_interleave(row, count) * n
            mark[reach[dist[reach] < 0]] = True
            frontier = torch.nonzero(mark).reshape(-1)
            mark[frontier] = False
            dist[frontier] = hop
        return dist.view(b, n)

    def _max_hops(self, block: int = 256) -> int:
        """The largest BFS hop distance over all pairs (-1 if some pair is unreachable), ``block``
        sources at a time."""
        top = 0
        for lo in range(0, self.num_nodes, block):
            dist = self.hop_distances(torch.arange(lo, min(self.num_nodes, lo + block)))
            if bool((dist < 0).any()):
                return -1
            top = max(top, int(dist.max()))
        return top

    @property
    def is_connected(self) -> bool:
        """Whether every node reaches every other (BFS from node 0)."""
        return bool((self.hop_distances(torch.zeros(1, dtype=torch.int64)) >= 0).all())

    @property
    def diameter(self) -> int:
        """Longest shortest-path hop count (BFS from every node).

        Raises:
            ValueError: If the graph is disconnected (infinite diameter).
        """
        top = self._max_hops()
        if top < 0:
            raise ValueError("the graph is disconnected: its diameter is infinite")
        return top

    def describe(self) -> dict[str, float | int | None]:
        """Summary: num_nodes, num_edges, min/max/mean degree, diameter (None when disconnected)."""
        deg = self.degree
        return {
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "min_degree": int(deg.min()),
            "max_degree": int(deg.max()),
            "mean_degree": float(deg.double().mean()),
            "diameter": self.diameter if self.is_connected else None,
        }


def metropolis_pair_weights(degree: Tensor, i: Tensor, j: Tensor) -> Tensor:
    """``W_ij = 1 / (1 + max(d_i, d_j))`` of the node pairs ``(i[e], j[e])`` (float64 ``[E]``).

    Args:
        degree: Node degrees ``[n]`` (:attr:`Graph.degree`).
        i: First nodes ``[E]``.
        j: Second nodes ``[E]``.
    """
    deg = degree.to(torch.float64)
    return 1.0 / (1.0 + torch.maximum(deg[i], deg[j]))


def metropolis_weights(graph: Graph) -> Tensor:
    """Metropolis-Hastings gossip weights (Xiao & Boyd 2004; DeceFL's mixing matrix).

    ``W_ij = 1 / (1 + max(d_i, d_j))`` for every edge ``{i, j}``, ``W_ii = 1 - sum_{j != i} W_ij``,
    0 elsewhere. ``W`` is symmetric and doubly stochastic with ``W_ii >= 1 / (1 + d_i) > 0``.
    ``n^2`` float64 (0.8 GB at 10,000 nodes): the gossip itself needs only
    :func:`metropolis_self_weights` and :func:`metropolis_pair_weights`.

    Returns:
        float64 ``[n, n]``.
    """
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    w = torch.zeros(graph.num_nodes, graph.num_nodes, dtype=torch.float64)
    val = metropolis_pair_weights(graph.degree, i, j)
    w[i, j] = val
    w[j, i] = val
    w += torch.diag(1.0 - w.sum(1))
    return w


def metropolis_self_weights(graph: Graph, block_rows: int = 256) -> Tensor:
    """The diagonal of :func:`metropolis_weights`, ``W_ii = 1 - sum_{j != i} W_ij``, without its ``[n, n]``.

    The rows of ``W`` are laid out dense ``block_rows`` at a time and summed as
    :func:`metropolis_weights` sums them: a row's sum is the same reduction over the same ``n``
    entries whichever rows are summed with it, so the bits are the same (tested against the whole
    matrix for 1 to 1,024 rows a block). Memory ``8 n block_rows`` bytes (20 MB at 10,000 nodes)
    instead of two ``n^2`` float64 matrices (1.6 GB).

    Args:
        graph: The graph.
        block_rows: Rows laid out at once.

    Returns:
        float64 ``[n]``.
    """
    n = graph.num_nodes
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    val = metropolis_pair_weights(graph.degree, i, j)
    rows, cols, vals = torch.cat([i, j]), torch.cat([j, i]), torch.cat([val, val])
    order = torch.argsort(rows, stable=True)
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = torch.searchsorted(rows, torch.arange(0, n + block_rows, block_rows).clamp(max=n)).tolist()
    out = torch.empty(n, dtype=torch.float64)
    block = torch.empty(min(n, block_rows), n, dtype=torch.float64)
    for b, lo in enumerate(range(0, n, block_rows)):
        hi = min(n, lo + block_rows)
        dense = block[: hi - lo].zero_()
        a, z = starts[b], starts[b + 1]
        dense[rows[a:z] - lo, cols[a:z]] = vals[a:z]
        out[lo:hi] = 1.0 - dense.sum(1)
    return out


class Topology(ABC):
    """A recipe for a communication graph (configured by ``class_path``/``init_args``).

    Subclasses set :attr:`min_nodes` and implement :meth:`_build`.
    """

    #: Fewest nodes the recipe can build.
    min_nodes: int = 1

    def build(self, num_nodes: int, seed: int = 0) -> Graph:
        """The graph on ``num_nodes`` nodes (``seed``: the run seed, for random topologies).

        Raises:
            ValueError: If ``num_nodes`` is too small for this topology (or inconsistent with it).
        """
        if int(num_nodes) < self.min_nodes:
            raise ValueError(
                f"topology {type(self).__name__} needs num_nodes >= {self.min_nodes} "
                f"(the number of centers), got {num_nodes}; use a larger federation or another topology"
            )
        return self._build(int(num_nodes), int(seed))

    @abstractmethod
    def _build(self, num_nodes: int, seed: int) -> Graph:
        """Build the graph (``num_nodes`` already checked against :attr:`min_nodes`)."""

    def report_key(self) -> str:
        """The graph's name in reports and in ``summary.json``'s ``setting`` (default: the class name).

        Reports group runs by it (:func:`lightning_fed.setting.run_setting`), so it names the graph,
        not one draw of it: two seeds of ``RandomRegular(4)`` share ``RR4``.
        """
        return type(self).__name__

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Complete(Topology):
    """Every pair of nodes is joined (diameter 1)."""

    def _build(self, num_nodes: int, seed: int) -> Graph:
        return Graph(num_nodes, torch.combinations(torch.arange(num_nodes), 2).reshape(-1, 2))


class Path(Topology):
    """``0 - 1 - ... - (n-1)`` (diameter ``n - 1``)."""

    def _build(self, num_nodes: int, seed: int) -> Graph:
        a = torch.arange(num_nodes - 1)
        return Graph(num_nodes, torch.stack([a, a + 1], 1))


class Cycle(Topology):
    """The ring ``0 - 1 - ... - (n-1) - 0`` (diameter ``floor(n / 2)``); needs ``n >= 3``."""

    min_nodes = 3

    def _build(self, num_nodes: int, seed: int) -> Graph:
        return Graph.from_pairs(num_nodes, _ring(list(range(num_nodes))))


def _ring(nodes: list[int]) -> list[tuple[int, int]]:
    """Edges of a cycle through ``nodes`` (one edge for two nodes, none for one)."""
    if len(nodes) < 2:
        return []
    if len(nodes) == 2:
        return [(nodes[0], nodes[1])]
    return [(nodes[k], nodes[(k + 1) % len(nodes)]) for k in range(len(nodes))]


class RandomRegular(Topology):
    """A connected random ``degree``-regular graph (RR-k; EdgeDRM Sec. 5 uses RR4).

    Sampled by random stub pairing: every node gets ``degree`` stubs; stubs are shuffled and paired,
    pairs forming a self-loop or a repeated edge are returned to the pool and re-paired, and the
    attempt restarts when no valid pair is left. Attempts that give a disconnected graph are
    discarded. All draws come from ``numpy_rng(seed, "topology")``, so a seed gives one graph.

    Args:
        degree: Neighbours of every node ``k`` (``1 <= k < n``, ``n * k`` even; ``k = 1`` is only
            connected for ``n = 2``).
        seed: Draw the graph from this seed instead of the run seed, so every training seed shares
            one graph (EdgeDRM App. D.1: the 32-client RR4 graph uses seed 82025); None: run seed.
    """

    #: Restarts before giving up (a valid connected graph is found in a few for k >= 3).
    max_attempts = 10_000

    def __init__(self, degree: int = 4, seed: int | None = None) -> None:
        if int(degree) < 1:
            raise ValueError(f"RandomRegular.degree must be >= 1, got {degree}")
        self.degree = int(degree)
        self.seed = None if seed is None else int(seed)

    @property
    def min_nodes(self) -> int:  # type: ignore[override]
        return self.degree + 1

    def report_key(self) -> str:
        """``RR<degree>`` (the paper's RR4)."""
        return f"RR{self.degree}"

    def _build(self, num_nodes: int, seed: int) -> Graph:
        n, k = num_nodes, self.degree
        if n * k % 2:
            raise ValueError(
                f"RandomRegular.degree={k} on {n} nodes: n * degree must be even; use an even degree"
            )
        if k == 1 and n > 2:
            raise ValueError(
                f"RandomRegular.degree=1 on {n} nodes is a perfect matching, never connected; use degree >= 2"
            )
        rng = numpy_rng(seed if self.seed is None else self.seed, "topology")
        for _ in range(self.max_attempts):
            pairs = _pair_stubs(n, k, rng)
            if pairs is None:
                continue
            graph = Graph.from_pairs(n, pairs)
            if graph.is_connected:
                return graph
        raise ValueError(
            f"RandomRegular.degree={k}: no connected graph on {n} nodes in {self.max_attempts} attempts"
        )


def _pair_stubs(n: int, k: int, rng) -> list[tuple[int, int]] | None:
    """One attempt of stub pairing: a simple k-regular edge list, or None when it got stuck."""
    edges: set[tuple[int, int]] = set()
    stubs = [v for v in range(n) for _ in range(k)]
    while stubs:
        order = rng.permutation(len(stubs))
        left: list[int] = []
        for a, b in zip(order[0::2], order[1::2], strict=True):
            u, v = sorted((stubs[a], stubs[b]))
            if u != v and (u, v) not in edges:
                edges.add((u, v))
            else:
                left += [u, v]
        if left:
            nodes = sorted(set(left))
            if not any((u, v) not in edges for x, u in enumerate(nodes) for v in nodes[x + 1 :]):
                return None
        stubs = left
    return sorted(edges)


class EdgeList(Topology):
    """A graph given edge by edge: one adjacency for every run seed (the seed is not read).

    The fixed RR4 graphs of the EdgeDRM benchmark are EdgeLists
    (``configs/edgedrm_bench/graphs/rr4_fixed8.yaml``, ``rr4_fixed32.yaml``): the paper uses one
    adjacency for every training seed (App. D.1), where :class:`RandomRegular` without a ``seed``
    would draw a new graph per run seed. The 8-client edges are the paper's neighbourhoods
    ``N(1) .. N(8)`` (App. D.1, 1-indexed there, 0-indexed here); the 32-client edges are
    ``RandomRegular(degree=4, seed=82025).build(32)`` written out (the paper's seed; its generator is
    not published, ours gives 64 edges and diameter four as the paper states).

    Args:
        edges: Node pairs ``[[i, j], ...]`` (orientation and order do not matter).
        name: The graph's name in reports (e.g. ``"RR4"``, so the EdgeDRM tables group a fixed RR4
            edge list with the RR4 rows); None: reports use the class name, ``EdgeList``.
    """

    def __init__(self, edges: list[list[int]], name: str | None = None) -> None:
        pairs = [tuple(int(v) for v in e) for e in edges]
        if any(len(p) != 2 for p in pairs):
            raise ValueError("EdgeList.edges must be a list of [i, j] pairs")
        if any(min(p) < 0 for p in pairs):
            raise ValueError("EdgeList.edges: node ids must be >= 0")
        if any(p[0] == p[1] for p in pairs):
            raise ValueError("EdgeList.edges holds a self-loop [i, i]; remove it")
        canon = [tuple(sorted(p)) for p in pairs]
        if len(set(canon)) != len(canon):
            raise ValueError("EdgeList.edges lists an edge twice; list each pair once")
        self.edges = [list(p) for p in pairs]
        self.name = None if name is None else str(name)

    @property
    def min_nodes(self) -> int:  # type: ignore[override]
        return 1 + max((max(e) for e in self.edges), default=0)

    def _build(self, num_nodes: int, seed: int) -> Graph:
        return Graph.from_pairs(num_nodes, self.edges)

    def report_key(self) -> str:
        """``name`` when given (the fixed ``RR4`` edge lists read as RR4), else ``EdgeList``."""
        return self.name or type(self).__name__


class HospitalTiers(Topology):
    """The hospital-tier graphs of EdgeDRM App. D.1 / Table 4 (paper: 16/8/8 hospitals).

    Nodes are ordered small (``0 .. s-1``), medium (``s .. s+m-1``), large (``s+m .. s+m+l-1``).
    Layered graph: a cycle within each tier; small node ``a`` linked to medium ``a mod m``; medium
    and large matched one to one (medium ``b mod m`` to large ``b mod l`` for ``b < max(m, l)``,
    a perfect matching when ``m = l``). With ``shortcut``, small node ``a`` also links to large
    ``a mod l`` (one predetermined small-large edge per small node). For 16/8/8 this gives 56
    layered edges (16 + 8 + 8 cycle, 16 small-medium, 8 medium-large) and 72 with shortcuts.

    Args:
        shortcut: Add the small-large edges.
        small: Number of small hospitals (>= 1).
        medium: Number of medium hospitals (>= 1).
        large: Number of large hospitals (>= 1).
    """

    def __init__(self, shortcut: bool = False, small: int = 16, medium: int = 8, large: int = 8) -> None:
        for name, value in (("small", small), ("medium", medium), ("large", large)):
            if int(value) < 1:
                raise ValueError(f"HospitalTiers.{name} must be >= 1, got {value}")
        self.shortcut = bool(shortcut)
        self.small, self.medium, self.large = int(small), int(medium), int(large)

    def report_key(self) -> str:
        """``Tiers-layered`` or ``Tiers-shortcut``, with ``small/medium/large`` appended when the tier
        sizes are not the paper's 16/8/8, so two tier graphs never share a report row."""
        name = "Tiers-shortcut" if self.shortcut else "Tiers-layered"
        sizes = (self.small, self.medium, self.large)
        return name if sizes == (16, 8, 8) else f"{name} {'/'.join(map(str, sizes))}"

    def _build(self, num_nodes: int, seed: int) -> Graph:
        s, m, lg = self.small, self.medium, self.large
        if num_nodes != s + m + lg:
            raise ValueError(
                f"HospitalTiers: num_nodes={num_nodes} (the number of centers) must equal "
                f"small + medium + large = {s} + {m} + {lg} = {s + m + lg}; set HospitalTiers.small/"
                "medium/large to match the federation"
            )
        small, medium, large = list(range(s)), list(range(s, s + m)), list(range(s + m, s + m + lg))
        pairs = _ring(small) + _ring(medium) + _ring(large)
        pairs += [(a, medium[a % m]) for a in small]
        pairs += [(medium[b % m], large[b % lg]) for b in range(max(m, lg))]
        if self.shortcut:
            pairs += [(a, large[a % lg]) for a in small]
        tiers = ("small",) * s + ("medium",) * m + ("large",) * lg
        return Graph.from_pairs(num_nodes, pairs, tiers)
