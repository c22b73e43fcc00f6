import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from torchmetrics.functional.classification import binary_auroc

from lightning_fed.metrics import batched_auroc, fragile_auroc, pooled_auroc


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _sk(scores, targets) -> float:
    t = np.asarray(targets)
    if t.size == 0 or t.min() == t.max():
        return math.nan
    return float(roc_auc_score(t, np.asarray(scores, dtype=np.float64)))


def _random_rows(seed: int, c: int = 12, n: int = 40):
    g = _gen(seed)
    scores = torch.round(torch.rand(c, n, generator=g, dtype=torch.float64) * 10) / 10  # many ties
    targets = (torch.rand(c, n, generator=g) < 0.4).long()
    lengths = torch.randint(0, n + 1, (c,), generator=g)
    mask = torch.arange(n)[None, :] < lengths[:, None]
    mask &= torch.rand(c, n, generator=g) < 0.9  # holes, not only right padding
    mask[0] = True  # one full row
    targets[1] = 1  # single-class row
    mask[2] = False  # empty row
    return scores, targets, mask


def test_batched_auroc_matches_sklearn_with_ties_masks_and_uneven_lengths():
    scores, targets, mask = _random_rows(0)
    # padded entries hold garbage that must be ignored
    scores = scores.masked_fill(~mask, 123.0)
    out = batched_auroc(scores, targets, mask)
    assert out.dtype == torch.float64 and out.shape == (12,)
    for i in range(12):
        m = mask[i]
        expected = _sk(scores[i][m], targets[i][m])
        if math.isnan(expected):
            assert math.isnan(out[i])
        else:
            assert abs(out[i].item() - expected) < 1e-12
    assert math.isnan(out[1]) and math.isnan(out[2])


def test_batched_auroc_no_mask_and_float32_input():
    g = _gen(1)
    scores = torch.round(torch.randn(5, 30, generator=g) * 3) / 3
    targets = torch.rand(5, 30, generator=g) < 0.5
    out = batched_auroc(scores, targets)
    for i in range(5):
        assert abs(out[i].item() - _sk(scores[i].double(), targets[i].long())) < 1e-12


def test_batched_auroc_degenerate_cases():
    assert torch.isnan(batched_auroc(torch.zeros(3, 0), torch.zeros(3, 0))).all()
    out = batched_auroc(torch.tensor([[0.5, 0.5, 0.5]]), torch.tensor([[0, 1, 1]]))
    assert out.item() == 0.5
    out = batched_auroc(torch.tensor([[0.1, 0.2], [0.2, 0.1]]), torch.tensor([[0, 1], [0, 1]]))
    assert out.tolist() == [1.0, 0.0]


def test_batched_auroc_validation():
    with pytest.raises(ValueError, match="scores"):
        batched_auroc(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match="targets"):
        batched_auroc(torch.zeros(2, 4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="mask"):
        batched_auroc(torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match="0/1"):
        batched_auroc(torch.zeros(1, 2), torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="finite"):
        batched_auroc(torch.tensor([[0.0, float("inf")]]), torch.tensor([[0, 1]]))
    # non-finite values in padded entries are fine
    out = batched_auroc(
        torch.tensor([[0.0, 1.0, float("nan")]]),
        torch.tensor([[0, 1, 0]]),
        torch.tensor([[True, True, False]]),
    )
    assert out.item() == 1.0


def _center_data(seed: int, n: int = 600, c: int = 7):
    g = _gen(seed)
    scores = torch.round(torch.rand(n, generator=g) * 20) / 20
    centers = torch.randint(0, c - 2, (n,), generator=g)  # centers c-2, c-1 get no rows
    targets = (torch.rand(n, generator=g) < 0.3).long()
    targets[centers == 0] = 0  # single-class center
    centers[:5] = c - 2
    targets[:5] = torch.tensor([0, 1, 0, 1, 1])
    return scores, targets, centers


@pytest.mark.filterwarnings("ignore:No positive samples")
def test_batched_auroc_matches_torchmetrics_except_on_a_single_class():
    scores, targets, centers = _center_data(2)
    width = int(torch.bincount(centers).max())
    pad_s, pad_t = torch.zeros(7, width, dtype=torch.float64), torch.zeros(7, width, dtype=torch.long)
    mask = torch.zeros(7, width, dtype=torch.bool)
    for c in range(7):
        sel = centers == c
        k = int(sel.sum())
        pad_s[c, :k], pad_t[c, :k], mask[c, :k] = scores[sel], targets[sel], True
    out = batched_auroc(pad_s, pad_t, mask)
    for c in range(7):
        sel = centers == c
        if torch.isnan(out[c]):
            continue
        assert abs(out[c].item() - binary_auroc(scores[sel], targets[sel]).item()) < 1e-6
    assert torch.isnan(out[[0, 6]]).all()
    # torchmetrics returns 0.0 for a single-class center, we return NaN
    assert binary_auroc(scores[centers == 0], targets[centers == 0]).item() == 0.0


def test_fragile_auroc_binary_and_multiclass():
    """Binary rows: 1 positive (fragile), 2 + 2 (sound), 1 negative (fragile), one class (undefined).
    Three classes: a class with one case (fragile), every class twice (sound)."""
    targets = torch.tensor([[0, 0, 0, 1, 0], [0, 1, 0, 1, 0], [1, 1, 0, 1, 1], [0, 0, 0, 0, 0]])
    mask = torch.ones_like(targets, dtype=torch.bool)
    mask[1, 4] = False  # padding is not a case
    scores = torch.rand(4, 5, generator=_gen(5))
    auroc = batched_auroc(scores, targets, mask)
    assert fragile_auroc(auroc, targets, mask).tolist() == [True, False, True, False]
    three = torch.tensor([[0, 0, 1, 2, 2, 1], [0, 0, 1, 1, 2, 2]])
    defined = torch.tensor([0.7, 0.6], dtype=torch.float64)
    assert fragile_auroc(defined, three, torch.ones_like(three, dtype=torch.bool)).tolist() == [False, False]
    three[0, 2] = 0  # class 1 now has one case
    assert fragile_auroc(defined, three, torch.ones_like(three, dtype=torch.bool)).tolist() == [True, False]
    undefined = torch.tensor([float("nan"), 0.6], dtype=torch.float64)
    assert fragile_auroc(undefined, three, torch.ones_like(three, dtype=torch.bool)).tolist() == [
        False,
        False,
    ]


def test_pooled_auroc_matches_sklearn():
    scores, targets, _ = _center_data(4)
    assert abs(pooled_auroc(scores, targets) - _sk(scores, targets)) < 1e-12
    assert math.isnan(pooled_auroc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1])))
    with pytest.raises(ValueError, match="shape"):
        pooled_auroc(torch.zeros(2, 2), torch.zeros(2, 2))
