"""DeceFL (Yuan et al. 2023, "DeceFL: a principled fully decentralized federated learning framework").

Centers sit on a fixed connected graph ``G`` (:class:`~lightning_fed.graphs.Topology`, default
RR-4) and never talk to a server. Each round every center runs its local gradient steps (the engine
already did) and then gossips once with its neighbours through the symmetric, doubly stochastic
Metropolis matrix (:func:`~lightning_fed.graphs.metropolis_weights`):

    theta_i <- sum_j W_ij theta_j,   W_ij = 1 / (1 + max(d_i, d_j)) on edges, W_ii = 1 - sum_{j!=i} W_ij

which is DeceFL's update ``x_i^{k+1} = sum_j w_ij x_j^k - eta grad f_i`` with the local steps of the
round in place of the single gradient step. Every center sends its shared parameters to each
neighbour (``wire.send``), so each edge carries ``2|W|`` bytes per round. Personal (head) layers,
when configured, stay local and out of the mix.

Partners (:class:`~lightning_fed.algorithms.peers.PeerAlgorithm`): by default the neighbours on
the fixed graph (``topology``, i.e. ``selector: GraphNeighbours(topology)``), whose Metropolis matrix
is built once. Any other :class:`~lightning_fed.selection.PartnerSelector` may choose them instead
(``algorithm.init_args.selector``, e.g. :class:`~lightning_fed.selection.RandomPartners`); the
weights are then the Metropolis weights of each round's partner graph, with the degrees of that
round's partner sets (:func:`~lightning_fed.aggregation.mixing.metropolis_edge_weights`).

Faults: a center that is not :meth:`Wire.available <lightning_fed.comm.wire.Wire.available>` sends
and receives nothing and keeps its parameters. A receiver validates every message (:meth:`Wire.accept
<lightning_fed.comm.wire.Wire.accept>`, reference: its own shared parameters) and drops a rejected
one. The Metropolis row of center ``i`` is then renormalized over what arrived, keeping the self
weight: ``theta_i <- (W_ii theta_i + sum_{j in A_i} W_ij theta_j) / (W_ii + sum_{j in A_i} W_ij)``
with ``A_i`` the accepted neighbours (with all of them, the denominator is 1).

Robust mixing (``aggregator``, :mod:`~lightning_fed.aggregation.robust`): a receiver combines its
own model and the messages it accepted by the aggregator, with those renormalized Metropolis
weights as the method's weights and its own model as the reference
(:meth:`Aggregator.mix_received <lightning_fed.aggregation.robust.Aggregator.mix_received>`); the
default :class:`~lightning_fed.aggregation.WeightedMean` is the Metropolis mix above, bit for bit.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from lightning_fed.aggregation.mixing import MIX_CHUNK_BYTES, metropolis_edge_weights, renormalize
from lightning_fed.aggregation.robust import Aggregator, aggregator_from
from lightning_fed.algorithms.peers import PeerAlgorithm
from lightning_fed.comm.exchange import peer_exchange
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.graphs.gossip import build_graph, graph_stats
from lightning_fed.graphs.topology import Topology, metropolis_pair_weights, metropolis_self_weights
from lightning_fed.models.base import CenterModule
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import RoundContext

# build_graph and graph_stats moved to lightning_fed.graphs.gossip; re-exported for the methods that
# import them from here.
__all__ = ["DeceFL", "build_graph", "graph_stats"]


class DeceFL(PeerAlgorithm):
    """Gossip averaging with Metropolis weights over the selected partners after every round of local steps.

    Args:
        topology: The communication graph (default :class:`~lightning_fed.graphs.RandomRegular` of
            degree 4, the RR4 of EdgeDRM Sec. 5), built on the centers with the run seed; shorthand
            for ``selector: GraphNeighbours(topology)``.
        personal_layers: Head layers kept local (0 shares everything).
        selector: Who gossips with whom (default ``GraphNeighbours(topology)``); exclusive with
            ``topology``.
        aggregator: How a receiver combines itself and what it accepted
            (:class:`~lightning_fed.aggregation.robust.Aggregator`; default
            :class:`~lightning_fed.aggregation.WeightedMean`, the Metropolis mix).
    """

    #: Audited (:meth:`Algorithm.replay_blocker`): each receiver mixes its own rows with the messages
    #: it accepted.
    owner_rows_suffice: ClassVar[bool] = True

    def __init__(
        self,
        topology: Topology | None = None,
        personal_layers: int = 0,
        selector: PartnerSelector | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(topology, selector, personal_layers)
        self.aggregator = aggregator_from(aggregator)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        #: The diagonal ``W_ii`` of the fixed graph's Metropolis matrix (None: each round's partner
        #: graph has its own weights); an edge's ``W_ij`` is computed from the graph's degrees when its
        #: message arrives, so no ``[C, C]`` matrix is held (0.8 GB at 10,000 centers).
        self.self_weight = None if self.graph is None else metropolis_self_weights(self.graph)
        self._round: dict[str, float] = {}

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = dict(params)
        out.update(self.gossip(self.shared(params), wire, ctx.round))
        return out

    def gossip(self, shared: dict[str, Tensor], wire: Wire, round_idx: int) -> dict[str, Tensor]:
        """One exchange of the stacked tensors ``shared`` with the selected partners (booked on round
        ``round_idx``) and the renormalized Metropolis mix of what arrived (module docstring)."""
        src, dst = self.round_edges(wire, round_idx)
        got = peer_exchange(wire, shared, src, dst, round_idx)
        if self.self_weight is not None:
            self_w, edge_w = self.self_weight, metropolis_pair_weights(self.graph.degree, got.dst, got.src)
        else:
            self_w, edge_w = metropolis_edge_weights(src, dst, got.src, got.dst, self.num_centers)
        self_w, edge_w = renormalize(self_w, edge_w, got.dst)
        self._round = {"mean_neighbours": len(got.dst) / self.num_centers}
        return self.aggregator.mix_received(
            shared, got.received, got.dst, self_w, edge_w, max_bytes=MIX_CHUNK_BYTES
        )

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)
