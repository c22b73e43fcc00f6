"""``data.split.folds`` / ``fold``: each center's ``k`` test folds partition its rows."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_fed.data import TeacherICU
from lightning_fed.data.center import PooledTable, build_federation
from lightning_fed.data.split import Split
from lightning_fed.seeding import numpy_rng


def _table(y: np.ndarray, site: np.ndarray) -> PooledTable:
    n = len(y)
    return PooledTable(
        x=np.random.default_rng(0).normal(size=(n, 2)),
        y=y,
        feature_names=("a", "b"),
        continuous=np.array([True, True]),
        year=np.full(n, 2020.0),
        site=site,
    )


def _groups(site: np.ndarray) -> list[tuple[str, np.ndarray]]:
    return [(str(s), np.flatnonzero(site == s)) for s in np.unique(site)]


# center A: 3 positives, 9 negatives (12 rows); center B: 5 positives, 5 negatives (10 rows)
_Y = np.array([1, 1, 1] + [0] * 9 + [1] * 5 + [0] * 5)
_SITE = np.array(["A"] * 12 + ["B"] * 10)


def test_test_folds_are_disjoint_and_cover_every_center() -> None:
    """Hand-built table, k = 3: per center the three test splits are disjoint, their union is the
    center's rows, and within a fold train / val / test are disjoint and cover the center.

    Round-robin dealing (``Split.fold_indices``): center A's 9 negatives are dealt first (3 per
    fold), then its 3 positives starting at fold 9 mod 3 = 0 (1 per fold): every test fold holds
    3 negatives and 1 positive. Center B: 5 negatives to folds 0,1,2,0,1 (2,2,1), then 5 positives
    from fold 5 mod 3 = 2: folds 2,0,1,2,0 (2,1,2), so fold sizes 4, 3, 3 (each within one of 10/3).
    """
    table = _table(_Y, _SITE)
    feds = [build_federation(table, _groups(_SITE), seed=7, split=Split(folds=3, fold=i)) for i in range(3)]
    expected = {"A": [(3, 1), (3, 1), (3, 1)], "B": [(2, 2), (2, 1), (1, 2)]}
    for c, name in enumerate(("A", "B")):
        rows = set(np.flatnonzero(name == _SITE).tolist())
        tests = [set(f.centers[c].row_ids["test"].tolist()) for f in feds]
        assert sum(len(t) for t in tests) == len(rows)  # disjoint ...
        assert set().union(*tests) == rows  # ... and covering
        for i, f in enumerate(feds):
            center = f.centers[c]
            ids = [set(center.row_ids[s].tolist()) for s in ("train", "val", "test")]
            assert sum(map(len, ids)) == len(rows) and set().union(*ids) == rows
            negatives = int((1 - center.y_test).sum())
            assert (negatives, int(center.y_test.sum())) == expected[name][i], (name, i)
            np.testing.assert_array_equal(center.y_test.numpy(), _Y[center.row_ids["test"]])


def test_val_is_the_fraction_ratio_of_the_rest() -> None:
    """Fold 0 of center A (k = 3, default 80/10/10): per class the rest is 6 negatives and 2
    positives; validation takes round(6/9) = 1 negative and round(2/9) = 0 positives. With
    ``min_per_class=1`` (each class has >= 2 rows) it takes 1 of each."""
    y = _Y[:12]
    tr, va, te = Split(folds=3, fold=0).indices(y, numpy_rng(0, "split", 0))
    assert (len(tr), len(va), len(te)) == (7, 1, 4) and int(y[va].sum()) == 0
    tr, va, te = Split(folds=3, fold=0, min_per_class=1).indices(y, numpy_rng(0, "split", 0))
    assert (len(tr), len(va), len(te)) == (6, 2, 4) and int(y[va].sum()) == 1


def test_folds_on_a_real_source_keep_other_splits_unchanged() -> None:
    """TeacherICU with folds: every center's five test folds partition its rows; no folds is the
    default split (the pinned hash in test_split.py covers that)."""
    feds = [
        TeacherICU(num_centers=5, num_stays=800, min_stays=40, split=Split(folds=5, fold=i)).build(1)
        for i in range(5)
    ]
    for c in range(feds[0].num_centers):
        tests = np.concatenate([f.centers[c].row_ids["test"] for f in feds])
        every = np.sort(np.concatenate([feds[0].centers[c].row_ids[s] for s in ("train", "val", "test")]))
        np.testing.assert_array_equal(np.sort(tests), every)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"folds": 1}, r"data\.split\.folds must be an integer >= 2"),
        ({"folds": 2.5}, r"data\.split\.folds must be an integer >= 2"),
        ({"folds": 3, "fold": 3}, r"data\.split\.fold must be in 0\.\.2"),
        ({"fold": 1}, r"data\.split\.fold=1 needs data\.split\.folds"),
        ({"folds": 3, "fold": True}, r"data\.split\.fold must be an integer"),
    ],
)
def test_bad_folds_are_refused_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        Split(**kwargs)
    assert "\n" not in str(err.value)


def test_center_smaller_than_k_is_refused() -> None:
    table = _table(_Y, _SITE)
    with pytest.raises(ValueError, match=r"fewer than data\.split\.folds=11"):
        build_federation(table, _groups(_SITE), seed=0, split=Split(folds=11))


def test_image_sources_honour_the_folds() -> None:
    """An image source given ``split`` deals each client's images into the same folds."""
    pytest.importorskip("sklearn")
    from lightning_fed.data import Digits

    feds = [Digits(num_clients=3, max_per_client=60, split=Split(folds=3, fold=i)).build(0) for i in range(3)]
    for c in range(3):
        tests = np.concatenate([f.centers[c].row_ids["test"] for f in feds])
        every = np.concatenate([feds[0].centers[c].row_ids[s] for s in ("train", "val", "test")])
        np.testing.assert_array_equal(np.sort(tests), np.sort(every))
