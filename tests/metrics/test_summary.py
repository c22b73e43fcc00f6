import dataclasses
import math

import numpy as np
import pytest
import torch

from lightning_fed.metrics import MetricSummary, summarize


def test_nan_aware_mean_std_and_counts_match_numpy():
    g = torch.Generator()
    g.manual_seed(0)
    values = torch.rand(50, generator=g, dtype=torch.float64)
    values[torch.rand(50, generator=g) < 0.3] = float("nan")
    s = summarize(values)
    arr = values.numpy()
    assert abs(s.mean - np.nanmean(arr)) < 1e-12
    assert abs(s.std - np.nanstd(arr)) < 1e-12  # ddof=0
    assert s.n_undefined == int(np.isnan(arr).sum())
    assert s.n_defined + s.n_undefined == 50


def test_all_nan_empty_and_single():
    s = summarize(torch.full((3,), float("nan")))
    assert math.isnan(s.mean) and math.isnan(s.std) and (s.n_defined, s.n_undefined) == (0, 3)
    s = summarize(torch.empty(0))
    assert math.isnan(s.mean) and (s.n_defined, s.n_undefined) == (0, 0)
    assert summarize(torch.tensor([0.7, float("nan")], dtype=torch.float64)) == MetricSummary(0.7, 0.0, 1, 1)


def test_frozen_and_validation():
    s = summarize(torch.tensor([1.0, 3.0]))
    assert (s.mean, s.std) == (2.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.mean = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="per_center"):
        summarize(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="per_center"):
        summarize(torch.tensor([1, 2]))
