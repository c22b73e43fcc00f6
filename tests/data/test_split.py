"""``data.split``: fractions, the ``min_per_class`` guarantee, and the default's bit-identical splits."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from lightning_fed.data import TeacherICU
from lightning_fed.data.center import PooledTable, build_federation, stratified_split
from lightning_fed.data.split import Split
from lightning_fed.seeding import numpy_rng


def _table(y: np.ndarray, site: np.ndarray) -> PooledTable:
    n = len(y)
    x = np.random.default_rng(0).normal(size=(n, 2))
    return PooledTable(
        x=x,
        y=y,
        feature_names=("a", "b"),
        continuous=np.array([True, True]),
        year=np.full(n, 2020.0),
        site=site,
    )


def _groups(site: np.ndarray) -> list[tuple[str, np.ndarray]]:
    return [(str(s), np.flatnonzero(site == s)) for s in np.unique(site)]


def test_min_per_class_puts_each_class_in_val_and_test() -> None:
    # center A: 2 positives, 10 negatives; center B: 4 positives, 2 negatives; C: 1 positive only
    y = np.array([1, 1] + [0] * 10 + [1, 1, 1, 1, 0, 0] + [1] + [0] * 11)
    site = np.array(["A"] * 12 + ["B"] * 6 + ["C"] * 12)
    table = _table(y, site)
    default = build_federation(table, _groups(site), seed=0)
    a = default.centers[0]
    assert a.y_val.sum() == 0 and a.y_test.sum() == 0  # today's rounded cut: both positives train
    fed = build_federation(table, _groups(site), seed=0, split=Split(min_per_class=1))
    for center in fed.centers[:2]:  # every center with >= 2 of each class
        for y_split in (center.y_val, center.y_test):
            assert int(y_split.sum()) >= 1 and int((1 - y_split).sum()) >= 1, center.name
    c = fed.centers[2]  # one positive: test gets it first
    assert int(c.y_test.sum()) == 1 and int(c.y_val.sum()) == 0
    for old, new in zip(default.centers, fed.centers, strict=True):  # no row lost or duplicated
        assert len(old.y_train) + len(old.y_val) + len(old.y_test) == (
            len(new.y_train) + len(new.y_val) + len(new.y_test)
        )


def test_guarantee_counts() -> None:
    split = Split(min_per_class=2)
    assert split.guarantee(8, 1, 10) == (6, 2, 2)  # rows come from train
    assert Split(0.0, 0.9, 0.1, min_per_class=1).guarantee(0, 3, 3) == (0, 2, 1)
    assert split.guarantee(3, 0, 3) == (0, 1, 2)  # fewer than 2 m: test first
    assert Split().guarantee(8, 1, 10) == (8, 1, 1)


def test_default_split_is_bit_identical_to_earlier_versions() -> None:
    fed = TeacherICU(num_centers=12, num_stays=3000, min_stays=40).build(3)
    digest = hashlib.sha256()
    for c in fed.centers:
        for t in (c.y_train, c.y_val, c.y_test, c.x_test):
            digest.update(t.numpy().tobytes())
    # computed on main before data.split existed (commit 480655c)
    assert digest.hexdigest() == "cbf41d967ce3f828e40732751f330a67366c5c8af5bfec241e941e8bd418c8c4"
    source = TeacherICU(num_centers=12, num_stays=3000, min_stays=40)
    table = source.table(3)
    from lightning_fed.data.partition import Natural

    for k, ((_, rows), center) in enumerate(zip(Natural().assign(table, 3), fed.centers, strict=True)):
        parts = stratified_split(table.y[rows], (0.8, 0.1, 0.1), numpy_rng(3, "split", k))
        np.testing.assert_array_equal(center.y_test.numpy(), table.y[rows[parts[2]]].astype(np.float32))


def test_split_fractions_change_sizes() -> None:
    fed = TeacherICU(num_centers=6, num_stays=1500, min_stays=40, split=Split(0.6, 0.2, 0.2)).build(0)
    for c in fed.centers:
        n = len(c.y_train) + len(c.y_val) + len(c.y_test)
        assert abs(len(c.y_test) - 0.2 * n) <= 2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"train": 0.8, "val": 0.1, "test": 0.2}, "data.split fractions must sum to 1"),
        ({"train": 1.2, "val": -0.1, "test": -0.1}, "data.split.train"),
        ({"min_per_class": -1}, "data.split.min_per_class"),
        ({"train": 0.9, "val": 0.0, "test": 0.1, "min_per_class": 1}, "data.split.min_per_class=1 needs"),
    ],
)
def test_bad_split_is_one_line(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as err:
        Split(**kwargs)
    assert "\n" not in str(err.value)


def test_split_from_config() -> None:
    from lightning_fed.fit_parser import fit_parser

    parser = fit_parser()
    cfg = parser.parse_args(
        [
            "--data=lightning_fed.data.TeacherICU",
            "--data.num_centers=4",
            "--data.split.min_per_class=1",
            "--data.split.train=0.7",
            "--data.split.val=0.15",
            "--data.split.test=0.15",
        ]
    )
    init = parser.instantiate_classes(cfg)
    assert init.data.split == Split(0.7, 0.15, 0.15, min_per_class=1)


def test_image_sources_honour_the_split() -> None:
    pytest.importorskip("sklearn")
    from lightning_fed.data import Digits

    default = Digits(num_clients=3, max_per_client=120).build(0)
    fed = Digits(num_clients=3, max_per_client=120, split=Split(0.5, 0.25, 0.25)).build(0)
    for old, new in zip(default.centers, fed.centers, strict=True):
        n = len(new.y_train) + len(new.y_val) + len(new.y_test)
        assert n == len(old.y_train) + len(old.y_val) + len(old.y_test)
        assert abs(len(new.y_train) - 0.5 * n) <= 10  # one row of rounding per class
