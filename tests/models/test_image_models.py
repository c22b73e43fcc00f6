"""Image models: shapes, the stride-one ResNet stem, vmap over stacked parameters, heads, loss, optimizer."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.engine.base import packed_logits
from lightning_fed.engine.optim import StackedSGD, stacked_optimizer_for
from lightning_fed.models import ResNet18GN, SmallCNN


@pytest.mark.parametrize(("channels", "side"), [(1, 28), (3, 32), (1, 8)])
def test_small_cnn_shapes(channels: int, side: int) -> None:
    model = SmallCNN(num_classes=7, embed_dim=16, width=8, groups=4)
    model.set_num_features(channels)
    x = torch.randn(5, channels, side, side)
    z = model.encode(x)
    assert z.shape == (5, 16) and bool((z >= 0).all())  # ReLU after the LayerNorm
    logits, rep = model.forward_features(x)
    assert logits.shape == (5, 7) and torch.allclose(rep, z) and torch.allclose(logits, model(x))
    assert torch.allclose(logits, z @ model.head.weight.T + model.head.bias)


def test_resnet18gn_architecture() -> None:
    """Standard width: 512 pooled features; stride-one stem, no max-pool, so 32x32 -> 4x4 before pooling
    (three stride-2 stages); GroupNorm everywhere (no BatchNorm buffers)."""
    model = ResNet18GN(in_channels=3)
    assert model.feature_dim == 512 and model.projection[0].in_features == 512
    assert model.encoder[0].stride == (1, 1) and model.encoder[0].kernel_size == (3, 3)
    assert not any(isinstance(m, torch.nn.MaxPool2d | torch.nn.BatchNorm2d) for m in model.modules())
    assert sum(isinstance(m, torch.nn.GroupNorm) for m in model.modules()) == 1 + 8 * 2 + 3
    assert all(m.num_groups == 32 for m in model.modules() if isinstance(m, torch.nn.GroupNorm))
    with torch.no_grad():
        trunk = model.encoder[:-2](torch.randn(1, 3, 32, 32))
        assert trunk.shape == (1, 512, 4, 4)
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert len(list(model.buffers())) == 0


def test_resnet_vmap_over_two_parameter_sets_equals_separate_forwards() -> None:
    model = ResNet18GN(num_classes=4, embed_dim=8, width=8, groups=4, in_channels=3).double()
    gen = torch.Generator().manual_seed(0)
    params = {
        n: torch.stack([p.detach(), p.detach() + 0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype)])
        for n, p in model.named_parameters()
    }
    x = torch.randn(2, 3, 3, 12, 12, generator=gen, dtype=torch.float64)
    direct = torch.vmap(lambda p, xb: torch.func.functional_call(model, p, (xb,)), randomness="different")(
        params, x
    )
    packed = packed_logits(model, params, x, None)  # the engine's fallback path
    for c in range(2):
        single = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x[c],))
        assert torch.allclose(direct[c], single, atol=1e-10)
        assert torch.allclose(packed[c], single, atol=1e-10)
    assert not torch.allclose(direct[0], direct[1])


def test_head_parameter_names() -> None:
    model = SmallCNN(in_channels=1)
    assert model.head_parameter_names(1) == ("head.weight", "head.bias")
    assert model.head_parameter_names(2) == (
        "projection.0.weight",
        "projection.0.bias",
        "projection.1.weight",
        "projection.1.bias",
        "head.weight",
        "head.bias",
    )
    names = dict(ResNet18GN(width=8, groups=4, in_channels=3).named_parameters())
    assert set(ResNet18GN(width=8, groups=4, in_channels=3).head_parameter_names(2)) <= set(names)
    with pytest.raises(ValueError, match="head layers"):
        model.head_parameter_names(3)


def test_loss_rows_is_per_row_cross_entropy() -> None:
    """Row 0: logits (0, log 3), class 1 -> -log(3 / 4). Row 1: (0, 0), class 0 -> log 2."""
    model = SmallCNN(num_classes=2, width=4, groups=2)
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    rows = model.loss_rows(logits, torch.tensor([1.0, 0.0]))
    assert torch.allclose(rows, torch.tensor([-math.log(0.75), math.log(2.0)]))
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 5, generator=gen)
    y = torch.randint(0, 5, (6,), generator=gen).float()
    expected = torch.nn.functional.cross_entropy(logits, y.long(), reduction="none")
    assert torch.allclose(model.loss_rows(logits, y), expected)
    stacked = model.loss_rows(logits.view(2, 3, 5), y.view(2, 3))  # packed engine: [k, B, K], [k, B]
    assert torch.allclose(stacked, expected.view(2, 3))


def test_training_step_and_sgd_optimizer() -> None:
    model = SmallCNN(num_classes=3, width=4, groups=2, in_channels=1, lr=0.03)
    model.log = lambda *a, **k: None  # type: ignore[method-assign]
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0.0, 1.0, 2.0, 1.0])
    loss = model.training_step((x, y), 0)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(model(x), y.long()))
    opt = model.configure_optimizers()
    assert isinstance(opt, torch.optim.SGD)
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.03, 0.9, 5e-4)
    assert isinstance(stacked_optimizer_for(opt), StackedSGD)


def test_configuration_errors() -> None:
    model = SmallCNN(width=4, groups=2, in_channels=3)
    with pytest.raises(ValueError, match=r"model\.in_channels"):
        model.set_num_features(1)
    with pytest.raises(ValueError, match=r"model\.groups"):
        ResNet18GN(width=16, groups=32)
    with pytest.raises(ValueError, match=r"model\.num_classes"):
        SmallCNN(num_classes=1)
    with pytest.raises(ValueError, match="set_num_features"):
        SmallCNN(width=4, groups=2)(torch.randn(1, 1, 8, 8))
