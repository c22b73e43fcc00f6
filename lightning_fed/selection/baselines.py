"""Baseline partner selectors that learn nothing: random partners and fixed graph neighbours.

Both plug into :class:`~lightning_fed.algorithms.ABPS` in place of its
:class:`~lightning_fed.selection.abps.BayesianSelector`, so a comparison changes only who is
selected: the exchange, the sample-weighted average, momentum, personal layers and the wire are
the same. Neither :attr:`~lightning_fed.selection.PartnerSelector.learns`, so ABPS computes no
Shapley credit with them.

* :class:`RandomPartners` (random-``kappa``): every round each available center gets up to
  ``kappa`` uniformly random partners. The matching is ABPS's own propose-reject
  (:func:`~lightning_fed.selection.abps.matching.propose_reject`) with independent uniform scores
  in place of the UCBs, everyone accepting (``tau_acc = 0``) and no exploration swap: centers
  propose in a random order, each down its own uniformly random ranking of the available peers,
  until it holds ``kappa`` partners, and a peer accepts while it has a free slot. The sets are
  symmetric with at most ``kappa`` partners each; as in ABPS, the greedy matching can leave a slot
  empty (e.g. an odd center out at ``kappa = 1``). All draws come from the generator
  ``(seed, "random-partners", round)``, so a run is reproducible and resumes exactly, with no state.
* :class:`GraphNeighbours`: the partners of center ``i`` are its neighbours on a fixed connected
  graph (a :class:`~lightning_fed.graphs.Topology` built once from the run seed, as the graph
  methods build theirs), restricted to the centers available that round. With the same topology
  and seed it is DeceFL's graph with ABPS's sample-weighted average in place of Metropolis weights.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.graphs.gossip import build_graph, directed_edges
from lightning_fed.graphs.topology import Graph, RandomRegular, Topology
from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.matching import propose_reject
from lightning_fed.selection.base import SELECTOR_KEY, PartnerSelector, partner_lists
from lightning_fed.selection.diagnostics import MatchRecord
from lightning_fed.validation import check_int

__all__ = ["GraphNeighbours", "RandomPartners"]


class RandomPartners(PartnerSelector):
    """Up to ``kappa`` uniformly random partners per center and round (random propose-reject).

    Args:
        kappa: Most partners per center and round (``>= 1``).
    """

    def __init__(self, kappa: int = 3) -> None:
        self.kappa = check_int(f"{SELECTOR_KEY}.kappa", kappa, 1)

    def setup(self, metadata: Tensor, seed: int) -> None:
        self.num_centers, self.seed = int(metadata.shape[0]), int(seed)

    def select(self, round_idx: int, available: Tensor | None = None) -> list[list[int]]:
        c = self.num_centers
        gen = torch_generator(self.seed, "random-partners", round_idx)
        scores = torch.rand(c, c, generator=gen, dtype=torch.float64)
        candidates = ~torch.eye(c, dtype=torch.bool)
        if available is not None:
            candidates &= available.unsqueeze(0) & available.unsqueeze(1)
        self.last_match = MatchRecord(candidates)  # everyone accepts: a rest is capacity or no candidate
        return propose_reject(scores, candidates, self.kappa, 0.0, 0.0, gen)


class GraphNeighbours(PartnerSelector):
    """The neighbours on a fixed graph, restricted to the available centers.

    The default selector of the graph methods (DeceFL, DFedAvgM, EdgeDRM, DeFTA): with it they
    exchange along exactly the edges they always did, in the same order (:meth:`edges`).

    Args:
        topology: The graph (default :class:`~lightning_fed.graphs.RandomRegular` of degree 4, the
            graph methods' default), built on the centers with the run seed; it must be connected.

    Attributes:
        config_key: The config path that errors about the graph name (a graph method that builds
            this selector from its own ``topology`` argument sets ``algorithm.topology``).
    """

    config_key: str = f"{SELECTOR_KEY}.topology"

    def __init__(self, topology: Topology | None = None) -> None:
        self.topology = topology if topology is not None else RandomRegular(4)

    def setup(self, metadata: Tensor, seed: int) -> None:
        self.num_centers = int(metadata.shape[0])
        self.graph: Graph = build_graph(self.topology, self.num_centers, seed, key=self.config_key)
        self.kappa = int(self.graph.degree.max()) if self.num_centers else 0

    def partners_everyone(self, num_centers: int) -> bool:
        """Only on a complete graph (the largest degree alone says nothing about the others)."""
        return bool((self.graph.degree >= num_centers - 1).all())

    def edges(self, round_idx: int, available: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Both directions of every graph edge whose ends are available, in the graph's edge order
        (:func:`~lightning_fed.graphs.gossip.directed_edges`)."""
        return directed_edges(self.graph, available)

    def select(self, round_idx: int, available: Tensor | None = None) -> list[list[int]]:
        src, dst = self.edges(round_idx, available)
        adjacency = torch.zeros(self.num_centers, self.num_centers, dtype=torch.bool)
        adjacency[src, dst] = True
        self.last_match = MatchRecord(adjacency)
        return [sorted(p) for p in partner_lists(src, dst, self.num_centers)]
