"""What the peer-to-peer methods share: their partners come from a partner selector.

A :class:`PeerAlgorithm` (DeceFL, DFedAvgM, EdgeDRM, DeFTA; WPFed in place of its LSH choice) asks
its :class:`~lightning_fed.selection.PartnerSelector` (``algorithm.init_args.selector``) for each
round's partnerships as directed edges (:meth:`~lightning_fed.selection.PartnerSelector.edges`,
restricted to the centers the wire has available), exchanges along them through the one exchange
path, and mixes what arrived with its own weights (Metropolis, trust, ranks): the methods differ
only in their mixing weights (docs/architecture.md, decision 15). So any selector plugs into any peer
method: :class:`~lightning_fed.selection.GraphNeighbours` (the default, built from ``topology``:
the fixed graph these methods always used, edge for edge), :class:`~lightning_fed.selection.RandomPartners`,
or ABPS's :class:`~lightning_fed.selection.abps.BayesianSelector` (which then learns nothing: only
ABPS computes the Shapley credit a selector observes).

``topology`` is the shorthand of earlier releases and stays: ``topology: T`` is
``selector: GraphNeighbours(T)``, with errors naming ``algorithm.topology``; giving both is an error.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.graphs.gossip import graph_stats
from lightning_fed.graphs.topology import Graph, Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.selection.baselines import GraphNeighbours

__all__ = ["JoinsNearestPeers", "PeerAlgorithm", "peer_selector"]


def peer_selector(topology: Topology | None, selector: PartnerSelector | None) -> PartnerSelector:
    """The selector of a peer method from its ``topology`` shorthand or its ``selector``.

    Raises:
        ValueError: If both are given.
    """
    if topology is not None and selector is not None:
        raise ValueError(
            "algorithm.init_args.topology and algorithm.init_args.selector both choose the partners: "
            "give one: set algorithm.init_args.topology to null to use the selector "
            "(topology: T is selector: GraphNeighbours(T))"
        )
    if selector is not None:
        return selector
    default = GraphNeighbours(topology)
    default.config_key = "algorithm.topology"  # the key the user wrote (or the default's)
    return default


class JoinsNearestPeers:
    """A newcomer of a peer-to-peer method receives the mean of its nearest peers' models.

    A center that did not train (``evaluation.holdout_centers``) has no partner history, no posterior
    and no place on a graph, so nothing of the learned selection applies to it. What it does have is
    its descriptor ``v_h`` (from its own train split), the thing ABPS's filter admits partners by; so
    it averages the final models of the ``evaluation.holdout_peers`` trained centers whose
    descriptors are most similar to its own (cosine, ABPS Eq. 3's homogeneity goal), each by its
    training rows (:func:`~lightning_fed.aggregation.newcomer.nearest_peer_weights`). The plain
    average over everyone is FedAvg's rule, which a peer method's personalized models need not
    share. Mixed into ABPS and :class:`PeerAlgorithm`.
    """

    def newcomer_weights(self, data: FederatedData, metadata: Tensor, peers: int) -> Tensor | None:
        """``[H, C]``: each newcomer's ``peers`` nearest trained centers by descriptor (class docstring)."""
        from lightning_fed.aggregation.newcomer import nearest_peer_weights

        return nearest_peer_weights(data.metadata(), data.n_train, metadata, peers)


class PeerAlgorithm(JoinsNearestPeers, Algorithm):
    """A decentralized method whose partners come from a :class:`~lightning_fed.selection.PartnerSelector`.

    Args:
        topology: Shorthand for ``selector: GraphNeighbours(topology)`` (default graph: RR4).
        selector: Who exchanges with whom each round (default ``GraphNeighbours(topology)``).
        personal_layers: Head layers kept local (0 shares everything).
    """

    def __init__(
        self,
        topology: Topology | None = None,
        selector: PartnerSelector | None = None,
        personal_layers: int = 0,
    ) -> None:
        super().__init__(personal_layers)
        self.selector = peer_selector(topology, selector)

    @property
    def graph(self) -> Graph | None:
        """The selector's fixed graph (after :meth:`setup`), or None when partners change by round."""
        return self.selector.graph

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Sizes and shared names; the selector is set up on the centers' descriptors and the seed."""
        super().setup(data, module, seed)
        self.selector.setup(data.metadata(), seed)

    def round_edges(self, wire: Wire, round_idx: int) -> tuple[Tensor, Tensor]:
        """This round's directed edges ``(src, dst)`` between centers the wire has available."""
        return self.selector.edges(round_idx, wire.available(round_idx, self.num_centers))

    def summary_stats(self) -> dict[str, float]:
        """The fixed graph's edges, mean degree and diameter (none without a fixed graph)."""
        return {} if self.graph is None else graph_stats(self.graph)
