"""Batched per-center accuracy, balanced accuracy and macro AUROC against sklearn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, balanced_accuracy_score, roc_auc_score

from lightning_fed.metrics import batched_accuracy, batched_balanced_accuracy, batched_macro_auroc


@pytest.mark.parametrize("num_classes", [2, 4])
def test_against_sklearn(num_classes: int) -> None:
    gen = torch.Generator().manual_seed(0)
    C, n = 5, 40
    logits = (
        torch.randn(C, n, num_classes, generator=gen) if num_classes > 2 else torch.randn(C, n, generator=gen)
    )
    y = torch.randint(0, num_classes, (C, n), generator=gen).float()
    y[:, :num_classes] = torch.arange(num_classes).float()  # every class present
    mask = torch.ones(C, n, dtype=torch.bool)
    mask[1, 30:] = False
    acc = batched_accuracy(logits, y, mask)
    bacc = batched_balanced_accuracy(logits, y, mask, num_classes)
    for c in range(C):
        m = mask[c].numpy()
        yt = y[c].numpy()[m].astype(int)
        pred = (logits[c].argmax(-1) if num_classes > 2 else (logits[c] > 0).long()).numpy()[m]
        assert float(acc[c]) == pytest.approx(accuracy_score(yt, pred))
        assert float(bacc[c]) == pytest.approx(balanced_accuracy_score(yt, pred))
    if num_classes > 2:
        auroc = batched_macro_auroc(logits, y, mask)
        for c in range(C):
            m = mask[c].numpy()
            prob = logits[c].softmax(-1).numpy()[m]
            ref = roc_auc_score(y[c].numpy()[m].astype(int), prob, multi_class="ovr", average="macro")
            assert float(auroc[c]) == pytest.approx(ref, rel=1e-6)


def test_empty_center_is_nan() -> None:
    logits = torch.zeros(2, 3)
    y = torch.zeros(2, 3)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert np.isnan(float(batched_accuracy(logits, y, mask)[1]))
    assert np.isnan(float(batched_balanced_accuracy(logits, y, mask, 2)[1]))
