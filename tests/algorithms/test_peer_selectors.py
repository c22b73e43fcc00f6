"""The peer methods take their partners from a PartnerSelector (issue 27, item 4).

The default, ``GraphNeighbours(topology)``, must reproduce the edges and the mix the graph methods
hard-wired before (compared with a copy of the former DeceFL gossip, faults included); any other
selector plugs into any peer method (RandomPartners into DFedAvgM, DeFTA, WPFed) and is mixed by the
method's own weights.
"""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.aggregation.mixing import metropolis_edge_weights, mix, mix_received, renormalize
from lightning_fed.algorithms import DeceFL, DeFTA, DFedAvgM, EdgeDRM, WPFed
from lightning_fed.comm import Wire
from lightning_fed.comm.exchange import peer_exchange
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.federation import Federation
from lightning_fed.graphs import Graph, RandomRegular, metropolis_weights
from lightning_fed.graphs.gossip import build_graph, directed_edges
from lightning_fed.models import MortalityMLP
from lightning_fed.selection import GraphNeighbours, RandomPartners, partner_edges
from lightning_fed.types import RoundContext, TrainerConfig
from tests.conftest import make_federation

CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: torch.full((len(centers),), 0.5))
SIZES = [30, 10, 20, 25, 15, 40, 12, 18]


def _random_params(module: MortalityMLP, centers: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randn(centers, *p.shape, generator=gen) for n, p in module.named_parameters()}


def _former_decefl_gossip(shared, graph, wire: Wire, round_idx: int, centers: int):
    """DeceFL.gossip as it was before the selector plugin (graph edges and Metropolis matrix)."""
    weights = metropolis_weights(graph)
    src, dst = directed_edges(graph, wire.available(round_idx, centers))
    got = peer_exchange(wire, shared, src, dst, round_idx)
    self_w, edge_w = renormalize(weights.diagonal().clone(), weights[got.dst, got.src], got.dst)
    return mix_received(shared, got.received, got.dst, self_w, edge_w)


@pytest.mark.parametrize(
    "faults", [None, FaultInjection(unavailable={1: [0, 3]}, corrupt={2: {5: "nan"}}, dropout={6: 2})]
)
def test_graph_neighbours_default_equals_the_former_hard_wired_edges_and_mix(faults) -> None:
    """Same edges in the same order, same bytes on the ledger, and the mixed parameters bit for bit."""
    data = make_federation(SIZES)
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    for algo in (DeceFL(), DeceFL(selector=GraphNeighbours(RandomRegular(4)))):
        algo.setup(data, module, seed=3)
        graph = build_graph(RandomRegular(4), len(SIZES), 3)
        assert torch.equal(algo.graph.edges, graph.edges)
        for r in range(3):
            wire_new, wire_old = Wire(faults=faults), Wire(faults=faults)
            available = wire_new.available(r, len(SIZES))
            src, dst = algo.selector.edges(r, available)
            old_src, old_dst = directed_edges(graph, available)
            assert torch.equal(src, old_src) and torch.equal(dst, old_dst)
            params = _random_params(module, len(SIZES), seed=r)
            ctx = RoundContext(round=r, seed=3, val_utility=CTX.val_utility)
            new = algo.aggregate(ctx, params, wire_new)
            old = _former_decefl_gossip(params, graph, wire_old, r, len(SIZES))
            assert all(torch.equal(new[n], old[n]) for n in old)
            assert wire_new.ledger.total() == wire_old.ledger.total()


def test_metropolis_edge_weights_equal_the_dense_matrix_of_the_round_graph() -> None:
    """For a selector without a fixed graph, the weights are the Metropolis matrix of that round's
    partner graph (checked against :func:`metropolis_weights` of the same graph)."""
    selector = RandomPartners(kappa=2)
    selector.setup(torch.zeros(len(SIZES), 3), seed=0)
    src, dst = partner_edges(selector.select(0))
    self_w, edge_w = metropolis_edge_weights(src, dst, src, dst, len(SIZES))
    dense = metropolis_weights(Graph.from_pairs(len(SIZES), torch.stack([src, dst], 1)))
    assert torch.allclose(self_w, dense.diagonal())
    assert torch.allclose(edge_w, dense[dst, src])


def test_random_partners_plugged_into_dfedavgm_mix_and_book_only_their_edges() -> None:
    """DFedAvgM with RandomPartners exchanges exactly the selector's partnerships (one message each
    way), and its mix is the Metropolis mix of that round's partner graph."""
    data = make_federation(SIZES)
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = DFedAvgM(selector=RandomPartners(kappa=2))
    algo.setup(data, module, seed=0)
    assert algo.graph is None and algo.summary_stats() == {}
    params, wire = _random_params(module, len(SIZES)), Wire()
    out = algo.aggregate(CTX, params, wire)
    # RandomPartners draws from (seed, round) alone: selecting round 0 again gives the same sets.
    expected_src, expected_dst = partner_edges(algo.selector.select(0))
    table = wire.ledger.table()
    assert sorted(zip(table["u"].tolist(), table["v"].tolist(), strict=True)) == sorted(
        {(min(a, b), max(a, b)) for a, b in zip(expected_src.tolist(), expected_dst.tolist(), strict=True)}
    )
    graph = Graph.from_pairs(len(SIZES), torch.stack([expected_src, expected_dst], 1))
    reference = mix(params, metropolis_weights(graph))
    assert all(torch.allclose(out[n], reference[n], atol=1e-6) for n in out)
    assert not all(torch.equal(out[n], params[n]) for n in out)


@pytest.mark.parametrize(
    "algorithm",
    [
        lambda: DFedAvgM(selector=RandomPartners(kappa=2)),
        lambda: DeFTA(selector=RandomPartners(kappa=2)),
        lambda: WPFed(selector=RandomPartners(kappa=2)),
        lambda: WPFed(selector=GraphNeighbours(RandomRegular(4))),
    ],
)
def test_any_selector_runs_in_any_peer_method_end_to_end(algorithm) -> None:
    """Two rounds of a federation: bytes are sent, the summary's AUROC is a number."""
    fed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(4, 3), dropout=0.0),
        algorithm(),
        TrainerConfig(rounds=2, batch_size=16),
        Fabric(accelerator="cpu", devices=1),
    )
    summary = fed.fit()
    assert summary["total_bytes"] > 0 and summary["rounds"] == 2
    assert 0.0 <= summary["test_auroc_pooled"] <= 1.0


def test_topology_and_selector_together_are_a_one_line_error() -> None:
    with pytest.raises(
        ValueError, match=r"algorithm\.init_args\.topology and algorithm\.init_args\.selector"
    ):
        DeceFL(topology=RandomRegular(4), selector=RandomPartners(2))


def test_edgedrm_refuses_a_selector_without_a_fixed_graph_before_training() -> None:
    data = make_federation(SIZES)
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    with pytest.raises(ValueError, match=r"algorithm\.init_args\.selector=RandomPartners has no fixed graph"):
        EdgeDRM(selector=RandomPartners(2)).setup(data, module, seed=0)


def test_the_topology_shorthand_names_its_own_key_in_errors() -> None:
    """``topology`` errors name ``algorithm.topology`` (the key written), as before the selector."""
    data = make_federation(SIZES[:3])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    with pytest.raises(ValueError, match=r"^algorithm\.topology=RandomRegular"):
        DeceFL(topology=RandomRegular(4)).setup(data, module, seed=0)
    with pytest.raises(
        ValueError, match=r"^algorithm\.init_args\.selector\.init_args\.topology=RandomRegular"
    ):
        DeceFL(selector=GraphNeighbours(RandomRegular(4))).setup(data, module, seed=0)
