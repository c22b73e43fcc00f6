"""The PartnerSelector plugin: the random-k and graph-neighbour baselines next to BayesianSelector."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.graphs import Cycle, EdgeList
from lightning_fed.selection import (
    GraphNeighbours,
    PartnerSelector,
    RandomPartners,
    partner_edges,
    partner_lists,
)
from lightning_fed.selection.abps import BayesianSelector


def _meta(c: int) -> torch.Tensor:
    return torch.zeros(c, 3, dtype=torch.float64)


def _symmetric(partners: list[list[int]]) -> bool:
    return all(i in partners[j] and i != j for i, ps in enumerate(partners) for j in ps)


def test_random_partners_at_most_kappa_symmetric_reproducible_and_new_each_round() -> None:
    """20 centers, kappa 3: every set has <= 3 distinct partners, j in P_i iff i in P_j; the same seed
    and round give the same sets, another round or another seed different ones; most slots fill."""
    sel = RandomPartners(kappa=3)
    sel.setup(_meta(20), seed=7)
    rounds = [sel.select(r) for r in range(4)]
    for partners in rounds:
        assert all(len(p) <= 3 and len(set(p)) == len(p) for p in partners)
        assert _symmetric(partners)
        assert sum(len(p) for p in partners) / 20 >= 2.5
    again = RandomPartners(kappa=3)
    again.setup(_meta(20), seed=7)
    assert [again.select(r) for r in range(4)] == rounds
    assert rounds[0] != rounds[1] and rounds[1] != rounds[2]
    other = RandomPartners(kappa=3)
    other.setup(_meta(20), seed=8)
    assert other.select(0) != rounds[0]


def test_random_partners_only_pair_available_centers() -> None:
    sel = RandomPartners(kappa=2)
    sel.setup(_meta(10), seed=0)
    available = torch.tensor([True, False] * 5)
    partners = sel.select(3, available=available)
    assert all(not partners[i] for i in range(1, 10, 2))
    assert all(j % 2 == 0 for p in partners for j in p)
    assert _symmetric(partners) and all(len(p) <= 2 for p in partners)


def test_random_partners_validates_kappa() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.init_args\.selector\.init_args\.kappa must be >= 1"):
        RandomPartners(kappa=0)


def test_graph_neighbours_on_a_cycle_are_exactly_the_cycle_neighbours() -> None:
    """Cycle(5): P_i = {i - 1, i + 1} mod 5, every round; an unavailable center drops out."""
    sel = GraphNeighbours(Cycle())
    sel.setup(_meta(5), seed=0)
    expected = [sorted({(i - 1) % 5, (i + 1) % 5}) for i in range(5)]
    assert sel.select(0) == expected and sel.select(9) == expected
    assert sel.kappa == 2
    down = sel.select(1, available=torch.tensor([True, True, False, True, True]))
    assert down == [[1, 4], [0], [], [4], [0, 3]]


def test_graph_neighbours_name_the_key_for_a_bad_topology() -> None:
    with pytest.raises(ValueError, match=r"selector\.init_args\.topology=EdgeList.*disconnected"):
        GraphNeighbours(EdgeList([[0, 1]])).setup(_meta(3), seed=0)
    with pytest.raises(ValueError, match=r"selector\.init_args\.topology=RandomRegular.*num_centers=3"):
        GraphNeighbours().setup(_meta(3), seed=0)


def test_partner_edges_and_lists_are_inverse() -> None:
    partners = [[1, 2], [0], [0], []]
    src, dst = partner_edges(partners)
    assert src.tolist() == [1, 2, 0, 0] and dst.tolist() == [0, 0, 1, 2]
    assert partner_lists(src, dst, 4) == partners


def test_only_the_bayesian_selector_learns() -> None:
    assert BayesianSelector.learns and not RandomPartners.learns and not GraphNeighbours.learns
    for cls in (BayesianSelector, RandomPartners, GraphNeighbours):
        assert issubclass(cls, PartnerSelector)
    sel = RandomPartners(1)
    sel.setup(_meta(4), seed=0)
    assert sel.state_dict() == {} and sel.filter is None


@pytest.mark.parametrize("make", [lambda: BayesianSelector(kappa=0), lambda: RandomPartners(kappa=0)])
def test_kappa_errors_name_the_real_config_key(make) -> None:
    """kappa is a selector argument: the error names ``algorithm.init_args.selector.init_args.kappa``
    (the key a config sets), not ``algorithm.kappa`` (which ABPS does not take)."""
    with pytest.raises(ValueError) as err:
        make()
    message = str(err.value)
    assert message.startswith("algorithm.init_args.selector.init_args.kappa must be")
    assert "\n" not in message


def test_bayesian_kappa_error_says_the_fix() -> None:
    with pytest.raises(
        ValueError, match=r"kappa must be >= 1 \(partners per center and round\), got 0: use e\.g\. 3"
    ):
        BayesianSelector(kappa=0)


def test_graph_neighbours_edges_are_the_graphs_directed_edges_in_graph_order() -> None:
    """``edges`` lists both directions of every graph edge whose ends are available, in the order the
    graph methods always exchanged in; ``select`` gives the same partnerships as sorted sets."""
    from lightning_fed.graphs.gossip import directed_edges

    sel = GraphNeighbours(Cycle())
    sel.setup(_meta(6), seed=0)
    available = torch.tensor([True, True, False, True, True, True])
    src, dst = sel.edges(0, available)
    ref_src, ref_dst = directed_edges(sel.graph, available)
    assert torch.equal(src, ref_src) and torch.equal(dst, ref_dst)
    assert [sorted(p) for p in partner_lists(src, dst, 6)] == sel.select(0, available)


def test_selection_base_imports_nothing_of_the_abps_package() -> None:
    """The plugin interface names only its own CandidateFilter; GoalFilter lives in the ABPS package
    (``selection/abps/filter.py``) and its old import path still gives the same class."""
    import ast
    from pathlib import Path

    import lightning_fed.selection.base as base
    from lightning_fed.selection.abps import GoalFilter
    from lightning_fed.selection.abps.filter import GoalFilter as HomeGoalFilter
    from lightning_fed.selection.abps.selector import GoalFilter as OldPathGoalFilter

    tree = ast.parse(Path(base.__file__).read_text())
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not any(m and m.startswith("lightning_fed.selection.abps") for m in modules)
    assert GoalFilter is HomeGoalFilter is OldPathGoalFilter and issubclass(GoalFilter, base.CandidateFilter)
