"""The referral table's source diagnostics: share of walks that visit the query's source client, and
the share of queries whose source lies within L moves of the entry (the ceiling for any router)."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.referral.panel import Queries
from lightning_fed.referral.refer import source_columns, within_hops
from lightning_fed.referral.routers import Routes


def test_within_hops_on_a_path_of_four() -> None:
    """Path 0-1-2-3: within one move of 0 are {0, 1}; within two {0, 1, 2}; 3 is three moves away."""
    adjacency = _path(4)
    one, two = within_hops(adjacency, 1), within_hops(adjacency, 2)
    assert one[0].tolist() == [True, True, False, False]
    assert two[0].tolist() == [True, True, True, False]
    assert two[1].all() and within_hops(adjacency, 3).all()
    assert torch.equal(within_hops(adjacency, 0), torch.eye(4, dtype=torch.bool))


def _path(n: int) -> torch.Tensor:
    a = torch.zeros(n, n, dtype=torch.bool)
    idx = torch.arange(n - 1)
    a[idx, idx + 1] = a[idx + 1, idx] = True
    return a


def test_source_columns_count_hits_and_the_reach_ceiling() -> None:
    """Four queries on Path 0-1-2-3, L = 2 (sources 3, 3, 0, 1; entries 1, 0, 2, 3):

    - walks 1->2->3 (hits 3), 0->1 (stops; 3 is three moves away: out of reach), 2->1->0 (hits 0),
      3 (no move; 1 is two moves away: in reach, missed) -> reached 2 / 4 = 50 %;
    - in reach: (1, 3) yes, (0, 3) no, (2, 0) yes, (3, 1) yes -> 75 %.
    Panel queries (no source) give no columns.
    """
    reach = within_hops(_path(4), 2)
    visited = torch.tensor([[1, 2, 3], [0, 1, -1], [2, 1, 0], [3, -1, -1]])
    routes = Routes(visited, torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 3, 2), torch.zeros(4))
    q = Queries(
        torch.zeros(4, 1), torch.zeros(4), torch.tensor([1, 0, 2, 3]), source=torch.tensor([3, 3, 0, 1])
    )
    cols = source_columns(routes, q, reach)
    assert cols == {"source_reached": pytest.approx(50.0), "source_in_reach": pytest.approx(75.0)}
    panel = Queries(q.x, q.y, q.entry, "panel 1x4", image=torch.zeros(4, dtype=torch.int64))
    assert source_columns(routes, panel, reach) == {}
