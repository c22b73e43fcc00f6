"""Functional stacked optimizers against torch.optim run per center."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.engine.optim import StackedAdam, StackedSGD, stacked_optimizer_for


def _reference(
    opt_factory, params: list[torch.Tensor], grads: list[list[torch.Tensor]]
) -> list[torch.Tensor]:
    out = []
    for c, p0 in enumerate(params):
        p = p0.clone().requires_grad_(True)
        opt = opt_factory([p])
        for g in grads[c]:
            p.grad = g.clone()
            opt.step()
        out.append(p.detach())
    return out


@pytest.mark.parametrize(
    ("factory", "stacked"),
    [
        (
            lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1),
            StackedAdam(0.01, (0.9, 0.999), 1e-8, 0.1),
        ),
        (
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
            StackedSGD(0.1, 0.9, 0, False, 0.01),
        ),
        (
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5, nesterov=True),
            StackedSGD(0.1, 0.5, 0, True, 0.0),
        ),
        (lambda ps: torch.optim.SGD(ps, lr=0.1), StackedSGD(0.1, 0.0, 0, False, 0.0)),
        (
            lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
            StackedAdam(0.01, (0.9, 0.999), 1e-8, 0.1, decoupled=True),
        ),
    ],
)
def test_prefix_steps_match_per_center_torch(factory, stacked) -> None:
    """Centers take 5, 3 and 1 steps (a prefix schedule): each must equal its own torch optimizer."""
    gen = torch.Generator().manual_seed(0)
    steps = [5, 3, 1]
    params = [torch.randn(4, 3, generator=gen, dtype=torch.float64) for _ in steps]
    grads = [[torch.randn(4, 3, generator=gen, dtype=torch.float64) for _ in range(s)] for s in steps]
    stack = {"w": torch.stack(params)}
    state = stacked.init_state(stack)
    for s in range(max(steps)):
        k = sum(n > s for n in steps)
        stacked.step(stack, {"w": torch.stack([grads[c][s] for c in range(k)])}, state, k)
    expected = torch.stack(_reference(factory, params, grads))
    assert torch.allclose(stack["w"], expected, atol=1e-12, rtol=0)
    assert state["step"].tolist() == steps


def test_unsupported_optimizer_is_a_clear_error() -> None:
    p = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(TypeError, match="SequentialEngine"):
        stacked_optimizer_for(torch.optim.RMSprop(p))
    assert isinstance(stacked_optimizer_for(torch.optim.AdamW(p)), StackedAdam)
    with pytest.raises(TypeError, match="amsgrad"):
        stacked_optimizer_for(torch.optim.Adam(p, amsgrad=True))
    assert isinstance(stacked_optimizer_for({"optimizer": torch.optim.Adam(p)}), StackedAdam)


def test_a_centers_adam_step_does_not_depend_on_how_many_centers_step() -> None:
    """The bias corrections ``1 - b^t`` come from C's ``pow`` per center, not torch's vectorized
    ``pow`` over the ``[k]`` step counts (which differs in the last bit and covers all but a tail):
    120 centers with step counts 1..120 stepped all at once or 5 at a time give the same bits (what
    makes a pass or a shard of the centers train as the whole federation). In float64: a float32
    step casts the corrections down, which hides their last bit."""
    dtype = torch.float64
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(120, 257, generator=gen, dtype=dtype)
    g = torch.randn(120, 257, generator=gen, dtype=dtype)
    whole_opt, part_opt = (StackedAdam(1e-3, (0.9, 0.999), 1e-8, 0.0) for _ in range(2))
    whole, state = {"w": p0.clone()}, whole_opt.init_state({"w": p0})
    state["step"].copy_(torch.arange(120))
    state["exp_avg.w"].copy_(g.abs())
    state["exp_avg_sq.w"].copy_(g * g)
    parts = [{n: t[lo : lo + 5].clone() for n, t in state.items()} for lo in range(0, 120, 5)]
    whole_opt.step(whole, {"w": g.clone()}, state, 120)
    for i, part_state in enumerate(parts):
        rows = slice(5 * i, 5 * i + 5)
        part = {"w": p0[rows].clone()}
        part_opt.step(part, {"w": g[rows].clone()}, part_state, 5)
        assert torch.equal(part["w"], whole["w"][rows]), i
