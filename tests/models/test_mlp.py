"""The mortality MLP: shapes, head names, packed forward and its dropout masks."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.models import MortalityMLP
from lightning_fed.models.mlp import dropout_mask


def test_packed_forward_equals_per_center_forward_without_dropout() -> None:
    model = MortalityMLP(in_features=5, hidden=(8, 4)).double().eval()
    gen = torch.Generator().manual_seed(0)
    params = {
        n: torch.randn(3, *p.shape, generator=gen, dtype=torch.float64) for n, p in model.named_parameters()
    }
    x = torch.randn(3, 7, 5, generator=gen, dtype=torch.float64)
    packed = model.packed_forward(params, x, None)
    for c in range(3):
        single = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x[c],))
        assert torch.allclose(packed[c], single, atol=1e-12)


def test_head_parameter_names_and_input_binding() -> None:
    model = MortalityMLP(hidden=(8, 4))
    model.set_num_features(6)
    assert model.head_parameter_names(1) == ("layers.2.weight", "layers.2.bias")
    assert model.head_parameter_names(2)[:2] == ("layers.1.weight", "layers.1.bias")
    with pytest.raises(ValueError, match="in_features"):
        model.set_num_features(7)
    with pytest.raises(ValueError, match="head layers"):
        model.head_parameter_names(4)


def test_dropout_mask_rate_scale_and_independence() -> None:
    """Keep rate ~ 1 - p, kept entries scaled so the mean is ~1, and two centers' masks differ."""
    gen = torch.Generator().manual_seed(0)
    mask = dropout_mask(torch.empty(2, 256, 128), 0.2, gen)
    kept = mask > 0
    assert abs(kept.float().mean().item() - 0.8) < 0.01
    assert abs(mask.mean().item() - 1.0) < 0.01
    assert torch.equal(mask.unique(), torch.tensor([0.0, 65536 / round(0.8 * 65536)]))
    assert (kept[0] != kept[1]).float().mean() > 0.25  # independent: ~2 * 0.8 * 0.2 = 0.32 differ
    again = dropout_mask(torch.empty(2, 256, 128), 0.2, torch.Generator().manual_seed(0))
    assert torch.equal(mask, again)


def test_hand_derived_gradients_equal_autograd() -> None:
    """packed_loss_grad against autograd through packed_forward, with dropout, masks and uneven rows."""
    model = MortalityMLP(in_features=5, hidden=(8, 4), dropout=0.3).double()
    gen = torch.Generator().manual_seed(0)
    params = {
        n: torch.randn(3, *p.shape, generator=gen, dtype=torch.float64) for n, p in model.named_parameters()
    }
    x = torch.randn(3, 6, 5, generator=gen, dtype=torch.float64)
    y = (torch.rand(3, 6, generator=gen) < 0.5).double()
    mask = torch.ones(3, 6, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[2, 1:] = 0
    grads = {n: torch.empty_like(p) for n, p in params.items()}
    loss = model.packed_loss_grad(params, x, y, mask, torch.Generator().manual_seed(7), grads)

    leaves = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    logits = model.packed_forward(leaves, x, torch.Generator().manual_seed(7))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
    expected_loss = (bce * mask).sum(1) / mask.sum(1)
    expected = torch.autograd.grad(expected_loss.sum(), list(leaves.values()))
    assert torch.allclose(loss, expected_loss.detach(), atol=1e-12)
    for (name, g), e in zip(grads.items(), expected, strict=True):
        assert torch.allclose(g, e, atol=1e-12), name
