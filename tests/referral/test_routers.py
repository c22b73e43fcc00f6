"""Routers: no revisits, at most L moves, moves only above eta, deterministic ties, grouped encoder passes."""

from __future__ import annotations

import itertools
import math

import torch

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.graphs.topology import Cycle, Graph, RandomRegular
from lightning_fed.referral.routers import (
    CountOnlyRouter,
    EdgeDRMRouter,
    FedDRMReference,
    NoReferral,
    OracleSourceRouter,
    RandomRouter,
    RouteSetup,
)

from .toy import ToyModule, identity_params


def setup_for(graph: Graph, pot: Potentials, max_hops: int, eta: float = 0.0, d: int = 3) -> RouteSetup:
    module = ToyModule(num_features=d, dim=d, num_classes=2)
    experts = Experts(module, identity_params(module, graph.num_nodes), batch_size=7)
    return RouteSetup(graph.adjacency, pot, experts, max_hops=max_hops, eta=eta, seed=5)


def random_potentials(c: int, d: int, seed: int) -> Potentials:
    gen = torch.Generator().manual_seed(seed)
    return Potentials(
        torch.randn(c, generator=gen, dtype=torch.float64),
        torch.randn(c, d, generator=gen, dtype=torch.float64),
        torch.randint(5, 50, (c,), generator=gen),
    )


def greedy_reference(x, entry, adj, pot, max_hops, eta, prior=True):
    """Per-query loop of EdgeDRM Algorithm 3.2 with the identity encoder (z = x)."""
    routes = []
    for q in range(x.shape[0]):
        cur, seen, route = int(entry[q]), {int(entry[q])}, [int(entry[q])]
        for _ in range(max_hops):
            z = x[q].double()
            best, best_s = None, -math.inf
            for j in range(adj.shape[0]):
                if adj[cur, j] and j not in seen:
                    s = float(z @ (pot.theta[j] - pot.theta[cur]) + pot.b[j] - pot.b[cur])
                    if prior:
                        s += math.log(float(pot.counts[j]) / float(pot.counts[cur]))
                    if s > best_s:  # strict: the lowest id wins ties
                        best, best_s = j, s
            if best is None or not best_s > eta:
                break
            cur = best
            seen.add(best)
            route.append(best)
        routes.append(route + [-1] * (max_hops + 1 - len(route)))
    return torch.tensor(routes)


def test_edgedrm_router_matches_per_query_greedy_reference() -> None:
    graph = RandomRegular(degree=4).build(10, seed=3)
    pot = random_potentials(10, 3, seed=1)
    x = torch.randn(80, 3, generator=torch.Generator().manual_seed(2))
    entry = torch.randint(0, 10, (80,), generator=torch.Generator().manual_seed(4))
    for prior, eta in [(True, 0.0), (False, 0.3)]:
        routes = EdgeDRMRouter(prior=prior).route(x, entry, setup_for(graph, pot, 4, eta))
        want = greedy_reference(x, entry, graph.adjacency, pot, 4, eta, prior)
        assert torch.equal(routes.visited, want)


def test_router_invariants_no_revisit_budget_threshold() -> None:
    """Every walk: distinct clients, <= L moves along edges, accepted scores > eta; a walk that stops
    early has no unvisited neighbour scoring above eta."""
    graph = Cycle().build(7, seed=0)
    pot = random_potentials(7, 3, seed=8)
    x = torch.randn(60, 3, generator=torch.Generator().manual_seed(9))
    entry = torch.arange(60) % 7
    eta, L = 0.1, 3
    setup = setup_for(graph, pot, L, eta)
    adj = graph.adjacency
    for router in (EdgeDRMRouter(), CountOnlyRouter(), RandomRouter()):
        routes = router.route(x, entry, setup)
        assert routes.visited.shape == (60, L + 1)
        for q in range(60):
            v = routes.visited[q][routes.valid[q]].tolist()
            assert len(v) == len(set(v)) <= L + 1
            assert all(bool(adj[a, b]) for a, b in itertools.pairwise(v))
            assert torch.equal(routes.valid[q], torch.arange(L + 1) < len(v))  # no holes
        if isinstance(router, EdgeDRMRouter):
            moved = routes.valid[:, 1:]
            assert bool((routes.scores[:, 1:][moved] > eta).all())
            for q in range(60):
                v = routes.visited[q][routes.valid[q]].tolist()
                if len(v) < L + 1:
                    last = v[-1]
                    s = pot.incident_scores(last, x[q : q + 1].double())[0]
                    free = adj[last].clone()
                    free[v] = False
                    assert not bool((s[free] > eta).any())


def test_deterministic_ties_go_to_lowest_id() -> None:
    """All potentials and counts equal -> every score is 0; with eta = -1 the walk takes the lowest
    unvisited neighbour: complete graph on 4, entry 2 -> 0 -> 1 -> 3."""
    graph = Graph(4, torch.tensor([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]))
    pot = Potentials(
        torch.zeros(4, dtype=torch.float64), torch.zeros(4, 3, dtype=torch.float64), torch.ones(4)
    )
    routes = EdgeDRMRouter().route(
        torch.randn(2, 3), torch.tensor([2, 2]), setup_for(graph, pot, 3, eta=-1.0)
    )
    assert routes.visited.tolist() == [[2, 0, 1, 3], [2, 0, 1, 3]]
    assert routes.incident.tolist() == [3 + 2 + 1] * 2
    # A score equal to eta is not enough (strict): with eta = 0 nobody moves.
    stay = EdgeDRMRouter().route(torch.randn(2, 3), torch.tensor([2, 1]), setup_for(graph, pot, 3, eta=0.0))
    assert stay.visited.tolist() == [[2, -1, -1, -1], [1, -1, -1, -1]]
    assert stay.incident.tolist() == [3, 3]


def test_count_only_no_referral_and_oracle() -> None:
    """Path 0-1-2 with n = (10, 20, 40): count-only climbs 0 -> 1 -> 2 with scores log 2, log 2 and
    stops at 2 (from 2 nothing is unvisited); NR stays; the oracle router jumps in one move to its argmax."""
    path = Graph(3, torch.tensor([[0, 1], [1, 2]]))
    pot = Potentials(
        torch.zeros(3, dtype=torch.float64),
        torch.zeros(3, 3, dtype=torch.float64),
        torch.tensor([10, 20, 40]),
    )
    setup = setup_for(path, pot, 2)
    x, entry = torch.zeros(1, 3), torch.tensor([0])
    count = CountOnlyRouter().route(x, entry, setup)
    assert count.visited.tolist() == [[0, 1, 2]]
    torch.testing.assert_close(
        count.scores, torch.tensor([[0.0, math.log(2), math.log(2)]], dtype=torch.float64)
    )
    nr = NoReferral().route(x, entry, setup)
    assert nr.visited.tolist() == [[0, -1, -1]] and nr.incident.tolist() == [0] and nr.calls.tolist() == [1]
    # The oracle's global head: client 2's rows sit at z = (5, 0, 0), the others at 0; a query at 5
    # from entry 0 goes straight to 2 although 0 and 2 share no edge.
    fed = OracleSourceRouter(epochs=150, lr=0.1)
    assert fed.label == "oracle router on EdgeDRM experts" and "FedDRM" not in fed.label
    far = torch.zeros(20, 3)
    far[:, 0] = 5.0
    fed.fit([torch.zeros(20, 3), torch.zeros(20, 3) + 0.1, far])
    routes = fed.route(far[:1], entry, setup)
    assert routes.visited.tolist() == [[0, 2, -1]]
    assert routes.incident.tolist() == [2]
    # The former name is a deprecated alias of the same class (old --routers configs still parse).
    assert FedDRMReference is OracleSourceRouter


def test_random_router_uses_budget_and_is_seeded() -> None:
    graph = Cycle().build(6, seed=0)
    pot = random_potentials(6, 3, seed=0)
    x, entry = torch.randn(30, 3), torch.arange(30) % 6
    a = RandomRouter().route(x, entry, setup_for(graph, pot, 3))
    b = RandomRouter().route(x, entry, setup_for(graph, pot, 3))
    assert torch.equal(a.visited, b.visited)
    assert bool((a.calls == 4).all())  # on a cycle of 6 an unvisited neighbour always remains for 3 moves
    assert float(a.scores.abs().sum()) == 0.0 and int(a.incident.sum()) == 0


def test_one_encoder_pass_per_group_and_hop() -> None:
    """Encoder calls = number of distinct (hop, current client) groups (batch size covers a group)."""
    graph = Cycle().build(5, seed=0)
    pot = random_potentials(5, 3, seed=3)
    module = ToyModule(num_features=3, dim=3)
    experts = Experts(module, identity_params(module, 5), batch_size=1000)
    setup = RouteSetup(graph.adjacency, pot, experts, max_hops=2, eta=-10.0, seed=0)
    x, entry = torch.randn(40, 3), torch.arange(40) % 5
    routes = EdgeDRMRouter().route(x, entry, setup)
    groups = sum(len(set(routes.visited[:, t][routes.valid[:, t]].tolist())) for t in range(3))
    assert module.encode_calls == groups
