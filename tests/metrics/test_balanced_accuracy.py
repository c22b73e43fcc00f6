import math
import warnings

import pytest
import torch
from sklearn.metrics import balanced_accuracy_score
from torchmetrics.classification import MulticlassAccuracy

from lightning_fed.metrics import BalancedAccuracy, balanced_accuracy


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _sk(target, preds) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(balanced_accuracy_score(target.numpy(), preds.numpy()))


def test_matches_sklearn_with_indices_and_scores_over_multiple_updates():
    g = _gen(0)
    logits = torch.randn(300, 4, generator=g)
    target = torch.randint(0, 4, (300,), generator=g)
    metric = BalancedAccuracy(num_classes=4)
    for chunk in torch.arange(300).split(70):
        metric.update(logits[chunk], target[chunk])
    expected = _sk(target, logits.argmax(1))
    assert abs(metric.compute().item() - expected) < 1e-12
    assert abs(balanced_accuracy(logits.argmax(1), target, 4).item() - expected) < 1e-12


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
        metric = BalancedAccuracy(num_classes=2, threshold=thr)
        metric.update(probs[:120], target[:120])
        metric.update(probs[120:], target[120:])
        assert abs(metric.compute().item() - _sk(target, (probs > thr).long())) < 1e-12
    logits = torch.logit(probs)
    from_logits = balanced_accuracy(logits, target, 2, from_logits=True)
    assert abs(from_logits.item() - _sk(target, (probs > 0.5).long())) < 1e-12
    with pytest.raises(ValueError, match="from_logits"):
        balanced_accuracy(logits, target, 2)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_empty_reset_and_validation():
    metric = BalancedAccuracy(num_classes=3)
    assert math.isnan(metric.compute().item())
    metric.update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    assert metric.compute().item() == 1.0
    metric.reset()
    assert math.isnan(metric.compute().item())
    with pytest.raises(ValueError, match="num_classes=2"):
        metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"\[n, K\]"):
        metric.update(torch.zeros(2, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="target"):
        metric.update(torch.tensor([0, 1]), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="preds"):
        metric.update(torch.tensor([0, 5]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="num_classes"):
        BalancedAccuracy(num_classes=1)
