"""Partitioners: Natural groups by site, Dirichlet label skew, IID near-equal split."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_fed.data.center import PooledTable
from lightning_fed.data.partition import IID, Dirichlet, Natural, Partitioner


def _table(n: int = 2000, pos_rate: float = 0.3, num_sites: int = 5, seed: int = 0) -> PooledTable:
    rng = np.random.default_rng(seed)
    return PooledTable(
        x=rng.standard_normal((n, 3)),
        y=(rng.random(n) < pos_rate).astype(np.int64),
        feature_names=("a", "b", "c"),
        continuous=np.array([True, True, False]),
        year=np.full(n, 2130),
        site=np.array([f"site-{k}" for k in rng.integers(0, num_sites, n)]),
    )


def _assert_exact_cover(groups: list[tuple[str, np.ndarray]], n: int) -> None:
    rows = np.concatenate([r for _, r in groups])
    assert len(rows) == n
    assert np.array_equal(np.sort(rows), np.arange(n))
    for _, r in groups:
        assert np.all(np.diff(r) > 0), "rows of a group are sorted and unique"


def _skew(table: PooledTable, groups: list[tuple[str, np.ndarray]]) -> float:
    """Mean absolute deviation of the centers' positive rates from the pooled rate."""
    rates = np.array([table.y[r].mean() for _, r in groups])
    return float(np.mean(np.abs(rates - table.y.mean())))


def test_partitioners_satisfy_protocol() -> None:
    for p in (Natural(), Dirichlet(3), IID(3)):
        assert isinstance(p, Partitioner)


def test_natural_groups_by_site_in_sorted_order() -> None:
    table = _table()
    groups = Natural().assign(table, seed=0)
    names = [name for name, _ in groups]
    assert names == sorted(set(table.site.tolist()))
    _assert_exact_cover(groups, len(table.y))
    for name, rows in groups:
        assert np.array_equal(rows, np.flatnonzero(table.site == name))
    # no randomness
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(groups, Natural().assign(table, 99), strict=True))


def test_dirichlet_covers_rows_once_and_respects_min_size() -> None:
    table = _table(n=3000)
    groups = Dirichlet(num_centers=10, alpha=0.3, min_size=25).assign(table, seed=1)
    assert [name for name, _ in groups] == [f"dirichlet-{k:03d}" for k in range(10)]
    _assert_exact_cover(groups, len(table.y))
    assert min(len(r) for _, r in groups) >= 25


def test_dirichlet_small_alpha_is_more_label_skewed() -> None:
    table = _table(n=4000, pos_rate=0.4)
    skew_small = np.mean([_skew(table, Dirichlet(8, alpha=0.1).assign(table, s)) for s in range(3)])
    skew_large = np.mean([_skew(table, Dirichlet(8, alpha=100.0).assign(table, s)) for s in range(3)])
    assert skew_small > 0.15
    assert skew_large < 0.05
    assert skew_small > 4 * skew_large


def test_dirichlet_is_seeded() -> None:
    table = _table()
    a = Dirichlet(6).assign(table, seed=3)
    b = Dirichlet(6).assign(table, seed=3)
    c = Dirichlet(6).assign(table, seed=4)
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True))
    assert any(not np.array_equal(x[1], y[1]) for x, y in zip(a, c, strict=True))


def test_dirichlet_impossible_min_size_raises() -> None:
    table = _table(n=100)
    with pytest.raises(ValueError, match="min_size"):
        Dirichlet(num_centers=10, min_size=20).assign(table, seed=0)
    with pytest.raises(ValueError, match="max_attempts"):
        Dirichlet(num_centers=9, alpha=0.01, min_size=11, max_attempts=3).assign(table, seed=0)


def test_iid_near_equal_and_seeded() -> None:
    table = _table(n=1003)
    groups = IID(7).assign(table, seed=0)
    assert [name for name, _ in groups] == [f"iid-{k:03d}" for k in range(7)]
    _assert_exact_cover(groups, 1003)
    sizes = [len(r) for _, r in groups]
    assert max(sizes) - min(sizes) <= 1
    again = IID(7).assign(table, seed=0)
    other = IID(7).assign(table, seed=1)
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(groups, again, strict=True))
    assert any(not np.array_equal(x[1], y[1]) for x, y in zip(groups, other, strict=True))
    with pytest.raises(ValueError, match="num_centers"):
        IID(2000).assign(table, seed=0)


@pytest.mark.parametrize(
    ("factory", "arg"),
    [
        (lambda: Dirichlet(0), "num_centers"),
        (lambda: Dirichlet(3, alpha=0.0), "alpha"),
        (lambda: Dirichlet(3, alpha=-1.0), "alpha"),
        (lambda: Dirichlet(3, alpha=float("nan")), "alpha"),
        (lambda: Dirichlet(3, min_size=0), "min_size"),
        (lambda: Dirichlet(3, max_attempts=0), "max_attempts"),
        (lambda: Dirichlet(2.5), "num_centers"),
        (lambda: IID(0), "num_centers"),
        (lambda: IID(True), "num_centers"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(factory, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        factory()
