"""Communication graphs (topologies) of decentralized federations and their mixing weights."""

from lightning_fed.graphs.topology import (
    Complete,
    Cycle,
    EdgeList,
    Graph,
    HospitalTiers,
    Path,
    RandomRegular,
    Topology,
    metropolis_pair_weights,
    metropolis_self_weights,
    metropolis_weights,
)

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
