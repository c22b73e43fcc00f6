"""DFedAvgM (Sun et al. 2023): local SGD with momentum, then Metropolis mixing with graph neighbours.

Each round every client runs its local steps (the engine, with the model's optimizer: SGD with
momentum for DFedAvgM, e.g. :class:`~lightning_fed.models.SmallCNN`), sends its shared parameters to
each neighbour (one message per directed edge on the wire) and mixes what it received (EdgeDRM Eq. 4):

    psi_i <- sum_{j in {i} ∪ N(i)} W_ij psi_j,     W = Metropolis weights of the graph

(``W_ij = 1 / (1 + max(d_i, d_j))`` on edges). With the default ``personal_layers=0`` the full model
(encoder and head) is mixed, as in EdgeDRM's stage I (App. D.2.1). No server exists.

The exchange and the mixing are DeceFL's (:class:`~lightning_fed.algorithms.DeceFL`, same graph
gossip, same fault handling: an unavailable client keeps its parameters, and a client's Metropolis
row is renormalized over the messages it accepted); what makes the method DFedAvgM is the local
optimizer (momentum SGD over several local steps) that the model configures. It is its own class so
configs and reports name the method the EdgeDRM paper compares against, and so that EdgeDRM extends it.
"""

from __future__ import annotations

from typing import ClassVar

from lightning_fed.algorithms.decefl import DeceFL

__all__ = ["DFedAvgM"]


class DFedAvgM(DeceFL):
    """Decentralized FedAvg with momentum over a fixed graph (DeceFL's gossip, momentum-SGD local steps).

    Args:
        topology: The communication graph recipe (built once in :meth:`setup` from the run seed);
            default ``RandomRegular(degree=4)`` (RR4, the paper's primary graph).
        personal_layers: Head layers kept local (0: mix the full model, as DFedAvgM does).
        selector: Who mixes with whom (default ``GraphNeighbours(topology)``; any
            :class:`~lightning_fed.selection.PartnerSelector`, e.g. ``RandomPartners``).
        aggregator: How a client combines itself and what it accepted (default
            :class:`~lightning_fed.aggregation.WeightedMean`, the Metropolis mix; a robust
            :class:`~lightning_fed.aggregation.robust.Aggregator` as a comparator).
    """

    #: Audited (:meth:`Algorithm.replay_blocker`): DeceFL's gossip; the momentum lives in the engine's
    #: per-center optimizer state.
    owner_rows_suffice: ClassVar[bool] = True
