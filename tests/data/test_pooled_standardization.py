"""The Centralized view: features re-standardized with pooled train statistics."""

from __future__ import annotations

import torch

from lightning_fed.data import SyntheticICU
from lightning_fed.data.center import pooled_standardization


def test_pooled_standardization_recovers_raw_units_and_pools_statistics() -> None:
    data = SyntheticICU(num_centers=6, num_stays=900).build(0)
    pooled = pooled_standardization(data)
    cont = data.feature_names.index("age")
    onehot = data.feature_names.index("gender_F")
    train = torch.cat([c.x_train for c in pooled.centers]).double()
    assert (
        abs(float(train[:, cont].mean())) < 1e-5 and abs(float(train[:, cont].std(unbiased=False)) - 1) < 1e-5
    )
    for before, after in zip(data.centers, pooled.centers, strict=True):
        raw_before = before.x_test.double() * before.feature_std + before.feature_mean
        raw_after = after.x_test.double() * after.feature_std + after.feature_mean
        assert torch.allclose(raw_before, raw_after, atol=1e-4)
        assert torch.equal(after.x_train[:, onehot], before.x_train[:, onehot])
        assert torch.equal(after.y_test, before.y_test)


def test_centers_without_statistics_are_left_alone(small_federation) -> None:
    assert pooled_standardization(small_federation) is small_federation


def test_values_a_center_imputed_are_reimputed_from_pooled_rows() -> None:
    """Center A observed x = (1, 3); center B observed nothing (all NaN, imputed 0 with indicator 1).
    Pooled: B's rows get the pooled train median of the observed values, not the raw value 0."""
    import numpy as np

    from lightning_fed.data.center import PooledTable, build_federation

    x = np.array(
        [[1.0], [3.0], [2.0], [np.nan], [np.nan], [np.nan], [np.nan], [np.nan], [np.nan], [np.nan]] * 2
    )
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1] * 2)
    site = np.array(["A"] * 3 + ["B"] * 7 + ["A"] * 3 + ["B"] * 7)
    table = PooledTable(
        x=x, y=y, feature_names=("v",), continuous=np.array([True]), year=np.full(20, 2150.0), site=site
    )
    groups = [(name, np.flatnonzero(site == name)) for name in ("A", "B")]
    data = build_federation(table, groups, seed=0, min_train=1)
    pooled = pooled_standardization(data)
    b = pooled.centers[1].x_train[:, 0]
    assert torch.allclose(b, b[0].expand_as(b))  # every B row got the same pooled fill
    a_train_raw = (
        data.centers[0].x_train[:, 0].double() * data.centers[0].feature_std[0]
        + data.centers[0].feature_mean[0]
    )
    fill = a_train_raw.median()
    mean, std = pooled.centers[1].feature_mean[0], pooled.centers[1].feature_std[0]
    assert torch.allclose(b[0].double() * std + mean, fill, atol=1e-5)
