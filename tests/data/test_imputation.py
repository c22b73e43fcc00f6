"""Per-center median imputation, missingness indicators and min_center_size in build_federation."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from lightning_fed.data.center import PooledTable, build_federation

NAN = float("nan")


def _table(y: list[int] | None = None) -> PooledTable:
    # columns: id (raw, unstandardized), hr (continuous, NaNs), flag (binary, NaNs), age (continuous, full)
    x = np.array(
        [
            # center A (rows 0-4)
            [0, 1.0, 1, 50],
            [1, NAN, 0, 60],
            [2, 3.0, NAN, 70],
            [3, 10.0, 1, 80],
            [4, NAN, 1, 90],
            # center B (rows 5-9): hr never observed
            [5, NAN, 0, 40],
            [6, NAN, 0, 40],
            [7, NAN, 1, 40],
            [8, NAN, 0, 40],
            [9, NAN, 0, 40],
        ]
    )
    y = y if y is not None else [0, 1, 0, 1, 0, 1, 0, 0, 1, 0]
    return PooledTable(
        x=x,
        y=np.asarray(y),
        feature_names=("id", "hr", "flag", "age"),
        continuous=np.array([False, True, False, True]),
        year=np.full(10, 2014),
        site=np.array(["A"] * 5 + ["B"] * 5),
    )


GROUPS = [("A", np.arange(5)), ("B", np.arange(5, 10))]


def test_indicators_and_hand_computed_two_center_imputation():
    fed = build_federation(_table(), GROUPS, seed=0, split=(1.0, 0.0, 0.0))
    assert fed.feature_names == ("id", "hr", "flag", "age", "hr_missing", "flag_missing")
    a, b = fed.centers
    # A: hr median of observed train [1, 3, 10] = 3 -> [1, 3, 3, 10, 3], mean 4, std sqrt(9.6)
    hr = (np.array([1, 3, 3, 10, 3]) - 4.0) / math.sqrt(9.6)
    np.testing.assert_allclose(a.x_train[:, 1].numpy(), hr, rtol=1e-6)
    assert a.feature_mean[1].item() == pytest.approx(4.0)
    assert a.feature_std[1].item() == pytest.approx(math.sqrt(9.6))
    # flag (binary, not standardized): median of [1, 0, 1, 1] = 1
    np.testing.assert_array_equal(a.x_train[:, 2].numpy(), [1, 0, 1, 1, 1])
    # indicators, not standardized
    np.testing.assert_array_equal(a.x_train[:, 4].numpy(), [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(a.x_train[:, 5].numpy(), [0, 0, 1, 0, 0])
    assert a.feature_mean[4:].tolist() == [0.0, 0.0] and a.feature_std[4:].tolist() == [1.0, 1.0]
    # B: hr all NaN in its own train split -> 0 after standardization (mean 0, std 1), never A's median
    np.testing.assert_array_equal(b.x_train[:, 1].numpy(), np.zeros(5))
    assert b.feature_mean[1].item() == 0.0 and b.feature_std[1].item() == 1.0
    np.testing.assert_array_equal(b.x_train[:, 4].numpy(), np.ones(5))
    np.testing.assert_array_equal(b.x_train[:, 5].numpy(), np.zeros(5))
    # age: constant in B -> std falls back to 1, standardized to 0
    np.testing.assert_array_equal(b.x_train[:, 3].numpy(), np.zeros(5))
    assert not any(torch.isnan(c.x_train).any() for c in fed.centers)


def test_val_and_test_filled_with_own_train_median():
    rng = np.random.default_rng(0)
    n = 40
    hr = rng.normal(80, 10, 2 * n)
    hr[rng.random(2 * n) < 0.3] = np.nan
    x = np.column_stack([np.arange(2 * n), hr])
    table = PooledTable(
        x=x,
        y=np.tile([0, 1], n),
        feature_names=("id", "hr"),
        continuous=np.array([False, True]),
        year=np.full(2 * n, 2015),
        site=np.repeat(["A", "B"], n),
    )
    fed = build_federation(table, [("A", np.arange(n)), ("B", np.arange(n, 2 * n))], seed=3)
    for c in fed.centers:
        train_ids = c.x_train[:, 0].long().numpy()
        median = np.nanmedian(hr[train_ids])
        for split in (c.x_val, c.x_test):
            ids = split[:, 0].long().numpy()
            missing = np.isnan(hr[ids])
            raw = split[:, 1].double().numpy() * c.feature_std[1].item() + c.feature_mean[1].item()
            np.testing.assert_allclose(raw[missing], median, rtol=1e-5)
            np.testing.assert_allclose(raw[~missing], hr[ids][~missing], rtol=1e-5)
            np.testing.assert_array_equal(split[:, 2].numpy(), missing.astype(np.float32))


def test_no_nan_means_no_indicator_columns():
    table = _table()
    x = np.nan_to_num(table.x, nan=1.0)
    clean = PooledTable(x, table.y, table.feature_names, table.continuous, table.year, table.site)
    fed = build_federation(clean, GROUPS, seed=0, split=(1.0, 0.0, 0.0))
    assert fed.feature_names == clean.feature_names
    assert fed.dropped_centers == ()


def test_min_center_size_drops_small_centers(caplog):
    groups = [("A", np.arange(5)), ("B", np.arange(5, 8))]
    with caplog.at_level(logging.WARNING, logger="lightning_fed.data.center"):
        fed = build_federation(_table(), groups, seed=0, split=(1.0, 0.0, 0.0), min_center_size=4)
    assert [c.name for c in fed.centers] == ["A"]
    assert fed.dropped_centers == ("B",)
    assert "dropped 1 of 2 centers" in caplog.text
    with pytest.raises(ValueError, match="min_center_size"):
        build_federation(_table(), groups, seed=0, min_center_size=6)
    with pytest.raises(ValueError, match="min_center_size"):
        build_federation(_table(), groups, seed=0, min_center_size=-1)


def test_single_class_label_is_an_error():
    with pytest.raises(ValueError, match="single class"):
        build_federation(_table(y=[0] * 10), GROUPS, seed=0, split=(1.0, 0.0, 0.0))
