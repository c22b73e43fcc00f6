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
