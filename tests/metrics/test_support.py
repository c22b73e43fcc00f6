"""Per-center support counts and the mean / robust / size-weighted AUROC averages, by hand."""

from __future__ import annotations

import math

import torch

from lightning_fed.metrics.support import auroc_averages, split_support


def test_counts_and_averages_by_hand() -> None:
    y = torch.tensor([[1.0, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]).bool()
    s = split_support(y, mask)
    assert s.n.tolist() == [4, 5, 2, 5]
    assert s.positives.tolist() == [1, 2, 0, 3] and s.negatives.tolist() == [3, 3, 2, 2]
    assert s.min_class.tolist() == [1, 2, 2, 2] and s.classes.tolist() == [2, 2, 1, 2]
    assert s.robust(2).tolist() == [False, True, False, True]
    auroc = torch.tensor([1.0, 0.5, float("nan"), 0.75], dtype=torch.float64)
    avg = auroc_averages(auroc, s, 2)
    assert math.isclose(avg["mean"], 0.75)
    assert math.isclose(avg["robust"], 0.625) and avg["robust_centers"] == 2
    assert math.isclose(avg["weighted"], (4 * 1.0 + 5 * 0.5 + 5 * 0.75) / 14)
    assert math.isnan(auroc_averages(auroc, s, 4)["robust"])
