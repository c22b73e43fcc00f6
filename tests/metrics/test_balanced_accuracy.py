import math
import warnings

import pytest
import torch
from sklearn.metrics import balanced_accuracy_score
from torchmetrics.classification import MulticlassAccuracy

from lightning_fed.metrics import balanced_accuracy, balanced_accuracy_rows


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _sk(target, preds) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(balanced_accuracy_score(target.numpy(), preds.numpy()))


def test_matches_sklearn_with_indices_and_scores():
    g = _gen(0)
    logits = torch.randn(300, 4, generator=g)
    target = torch.randint(0, 4, (300,), generator=g)
    expected = _sk(target, logits.argmax(1))
    assert abs(balanced_accuracy(logits, target, 4).item() - expected) < 1e-12
    assert abs(balanced_accuracy(logits.argmax(1), target, 4).item() - expected) < 1e-12


def test_rows_match_sklearn_row_by_row_with_padding():
    g = _gen(7)
    pred = torch.randint(0, 3, (6, 30), generator=g)
    target = torch.randint(0, 3, (6, 30), generator=g)
    target[2] = 1  # a single class present
    mask = torch.rand(6, 30, generator=g) < 0.7
    mask[5] = False  # no rows
    out = balanced_accuracy_rows(pred, target, mask, 3)
    assert out.dtype == torch.float64 and out.shape == (6,)
    for c in range(5):
        assert abs(out[c].item() - _sk(target[c][mask[c]], pred[c][mask[c]])) < 1e-12
    assert math.isnan(out[5])


def test_predicted_class_absent_from_targets_differs_from_torchmetrics_macro():
    preds = torch.tensor([0, 1, 2, 2, 0, 1])
    target = torch.tensor([0, 1, 1, 1, 0, 0])  # class 2 predicted, never a target
    ours = balanced_accuracy(preds, target, 3).item()
    assert abs(ours - _sk(target, preds)) < 1e-12  # (2/3 + 1/3) / 2
    assert abs(ours - 0.5) < 1e-12
    tm = MulticlassAccuracy(num_classes=3, average="macro")(preds, target).item()
    assert abs(tm - 1 / 3) < 1e-6  # torchmetrics keeps class 2 with recall 0
    assert abs(tm - ours) > 0.1


def test_binary_probabilities_threshold_and_logits():
    g = _gen(1)
    probs = torch.rand(200, generator=g)
    target = (torch.rand(200, generator=g) < 0.3).long()
    for thr in (0.5, 0.3):
        ours = balanced_accuracy(probs, target, 2, threshold=thr)
        assert abs(ours.item() - _sk(target, (probs > thr).long())) < 1e-12
    logits = torch.logit(probs)
    from_logits = balanced_accuracy(logits, target, 2, from_logits=True)
    assert abs(from_logits.item() - _sk(target, (probs > 0.5).long())) < 1e-12
    with pytest.raises(ValueError, match="from_logits"):
        balanced_accuracy(logits, target, 2)


def test_empty_and_validation():
    assert math.isnan(
        balanced_accuracy(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 3)
    )
    assert balanced_accuracy(torch.tensor([0, 1]), torch.tensor([0, 1]), 3).item() == 1.0
    with pytest.raises(ValueError, match="num_classes=2"):
        balanced_accuracy(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match=r"\[n, K\]"):
        balanced_accuracy(torch.zeros(2, 4), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="target"):
        balanced_accuracy(torch.tensor([0, 1]), torch.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match="preds"):
        balanced_accuracy(torch.tensor([0, 5]), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="num_classes"):
        balanced_accuracy(torch.tensor([0, 1]), torch.tensor([0, 1]), 1)
    with pytest.raises(ValueError, match="target"):
        balanced_accuracy_rows(
            torch.zeros(1, 2, dtype=torch.long), torch.tensor([[0, 4]]), torch.ones(1, 2, dtype=torch.bool), 3
        )
