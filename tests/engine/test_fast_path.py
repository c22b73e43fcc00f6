"""The buffer-reusing fast path and Adam against the allocating code they replaced, bit for bit.

The references below are the engine's previous implementations (fresh tensors for every
temporary): the speed work must not move a single bit of a shipped result.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lightning_fed.engine.optim import StackedAdam
from lightning_fed.engine.packed import CenterStreams
from lightning_fed.models import MortalityMLP
from lightning_fed.models.mlp import dropout_mask


def _bits(t: Tensor) -> Tensor:
    return t.contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def _reference_linear(h: Tensor, w: Tensor, b: Tensor) -> Tensor:
    if w.shape[1] == 1:
        w2, b2 = torch.cat([w, torch.zeros_like(w)], 1), torch.cat([b, torch.zeros_like(b)], 1)
        return torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2))[..., :1]
    return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))


def _reference_loss_grad(
    model: MortalityMLP, params: dict, x: Tensor, y: Tensor, mask: Tensor, gen, grads: dict
) -> Tensor:
    """The fast path as it was: float gates ``(z > 0) * dropout_mask``, fresh tensors, bmm for dz W."""
    acts, gates, h, last = [x], [], x, len(model.layers) - 1
    for i in range(len(model.layers)):
        h = _reference_linear(h, params[f"layers.{i}.weight"], params[f"layers.{i}.bias"])
        if i < last:
            gate = (h > 0).to(h.dtype)
            if gen is not None and model.dropout > 0:
                gate.mul_(dropout_mask(h, model.dropout, gen))
            h = h * gate
            gates.append(gate)
            acts.append(h)
    logits, count = h.squeeze(-1), mask.sum(1)
    per_row = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
    loss = (per_row * mask).sum(1) / count
    dz = ((torch.sigmoid(logits) - y) * mask / count.unsqueeze(1)).unsqueeze(-1)
    for i in range(last, -1, -1):
        w = params[f"layers.{i}.weight"]
        grads[f"layers.{i}.weight"].copy_(torch.bmm(dz.transpose(1, 2), acts[i]))
        grads[f"layers.{i}.bias"].copy_(dz.sum(1))
        if i > 0:
            dz = torch.bmm(dz, w).mul_(gates[i - 1])
    return loss


def _case(dtype: torch.dtype, k: int, hidden: tuple[int, ...], dropout: float):
    gen = torch.Generator().manual_seed(0)
    model = MortalityMLP(in_features=7, hidden=hidden, dropout=dropout).to(dtype)
    params = {n: torch.randn(k, *p.shape, generator=gen, dtype=dtype) for n, p in model.named_parameters()}
    x = torch.randn(k, 64, 7, generator=gen, dtype=dtype)
    y = (torch.rand(k, 64, generator=gen) < 0.4).to(dtype)
    mask = torch.ones(k, 64, dtype=dtype)
    mask[1, 40:] = 0  # a short last batch
    mask[-1, 3:] = 0
    return model, params, x, y, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("hidden", "dropout"), [((128, 64), 0.2), ((16, 8, 4), 0.3), ((32,), 0.0)])
def test_fast_path_is_bit_identical_to_the_allocating_reference(
    dtype: torch.dtype, hidden: tuple[int, ...], dropout: float
) -> None:
    """Per-center streams, short batches; with and without a workspace, and with a workspace
    reused at a smaller ``k`` afterwards (its buffers then hold stale, larger contents)."""
    workspace: dict[str, Tensor] = {}
    for k in (6, 3):
        model, params, x, y, mask = _case(dtype, k, hidden, dropout)
        results = []
        for ws in ("reference", None, workspace):
            grads = {n: torch.full_like(p, float("nan")) for n, p in params.items()}
            streams = CenterStreams(seed=3, round_idx=1, centers=range(k), device=torch.device("cpu"))
            if ws == "reference":
                loss = _reference_loss_grad(model, params, x, y, mask, streams, grads)
            else:
                loss = model.packed_loss_grad(params, x, y, mask, streams, grads, workspace=ws)
            results.append((loss, grads))
        (ref_loss, ref_grads), *others = results
        for loss, grads in others:
            assert torch.equal(_bits(loss), _bits(ref_loss))
            for n in ref_grads:
                assert torch.equal(_bits(grads[n]), _bits(ref_grads[n])), (k, n)
    assert workspace, "the workspace was not used"


def _reference_adam_step(opt: StackedAdam, params: dict, grads: dict, state: dict, k: int) -> None:
    """StackedAdam.step as it was (a fresh tensor per temporary)."""
    steps = state["step"][:k]
    steps += 1
    t = steps.to(torch.float64)
    bc1, bc2_sqrt = 1.0 - opt.beta1**t, torch.sqrt(1.0 - opt.beta2**t)
    for name, g in grads.items():
        p = params[name][:k]
        m, v = state[f"exp_avg.{name}"][:k], state[f"exp_avg_sq.{name}"][:k]
        if opt.weight_decay:
            g = g.add(p, alpha=opt.weight_decay)
        m.lerp_(g, 1.0 - opt.beta1)
        v.mul_(opt.beta2).addcmul_(g, g, value=1.0 - opt.beta2)
        denom = (v.sqrt() / bc2_sqrt.view(-1, 1).to(v.dtype)).add_(opt.eps)
        p.sub_((opt.lr / bc1).view(-1, 1).to(p.dtype) * m / denom)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_in_place_adam_is_bit_identical_to_the_allocating_reference(
    dtype: torch.dtype, weight_decay: float
) -> None:
    """A prefix schedule (active centers 5, 5, 3, 1, 1) over 5 stacked centers of 300 parameters."""
    gen = torch.Generator().manual_seed(0)
    start = {"flat": torch.randn(5, 300, generator=gen, dtype=dtype)}
    grads = [torch.randn(k, 300, generator=gen, dtype=dtype) * 1e-2 for k in (5, 5, 3, 1, 1)]
    out = []
    for in_place in (True, False):
        opt = StackedAdam(1e-3, (0.9, 0.999), 1e-8, weight_decay)
        params = {"flat": start["flat"].clone()}
        state = opt.init_state(params)
        for g in grads:
            step = opt.step if in_place else lambda *a, opt=opt: _reference_adam_step(opt, *a)
            step(params, {"flat": g.clone()}, state, g.shape[0])
        out.append((params["flat"], state))
    (p_new, s_new), (p_ref, s_ref) = out
    assert torch.equal(_bits(p_new), _bits(p_ref))
    for name, t in s_ref.items():
        assert torch.equal(s_new[name], t), name
