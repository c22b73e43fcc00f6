"""DP-SGD in the engines (``trainer.dp.level: sample``): the packed engine's clipped per-row
gradients equal a per-row loop, its noise is keyed by (seed, round, center, step), and it trains
as the sequential reference does."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.dp import DPConfig, step_noise
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.objective import LocalTerm
from lightning_fed.models import MortalityMLP

# Uneven sizes: short last batches are padded in the packed engine and the active prefix shrinks.
SIZES = [3, 9, 16, 21, 40]
DP = DPConfig(level="sample", noise_multiplier=1.3, max_grad_norm=0.05, delta=1e-5)


def _data(dtype: torch.dtype = torch.float64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(n, 6, generator=gen, dtype=dtype) * 2, (torch.rand(n, generator=gen) < 0.4).to(dtype))
        for n in SIZES
    ]


def _module(dropout: float = 0.0) -> MortalityMLP:
    torch.manual_seed(1)
    return MortalityMLP(in_features=6, hidden=(8, 4), dropout=dropout).double()


def _engines(dp: DPConfig | None = DP, rounds: int = 2):
    out = []
    for engine in (PackedEngine(), SequentialEngine()):
        engine.setup(_module(), _data(), batch_size=8, epochs=2, seed=5, dtype=torch.float64, dp=dp)
        for r in range(rounds):
            engine.train_round(r)
        out.append(engine)
    return out


def test_packed_clipped_per_row_gradients_equal_a_per_row_loop() -> None:
    """The packed engine's per-row gradients (vmap over centers and rows) against one backward per
    row of a plain module copy, then clipped to C by hand: ``g_b min(1, C / ||g_b||)``."""
    engine = PackedEngine()
    engine.setup(_module(), _data(), batch_size=8, epochs=1, seed=5, dtype=torch.float64, dp=DP)
    k = engine.num_models
    gen = torch.Generator().manual_seed(2)
    xb = torch.randn(k, 8, 6, generator=gen, dtype=torch.float64) * 3
    yb = (torch.rand(k, 8, generator=gen) < 0.5).double()
    rows, losses = engine.dp_rows(k, xb, yb)
    views = engine._views(engine.flat)
    model = _module()
    for p in range(k):
        with torch.no_grad():
            for n, t in model.named_parameters():
                t.copy_(views[n][p])
        for b in range(8):
            model.zero_grad()
            loss = model.loss_rows(model(xb[p, b : b + 1]), yb[p, b : b + 1]).mean()
            loss.backward()
            g = torch.cat([t.grad.reshape(-1) for _, t in model.named_parameters()])
            clipped = g * min(1.0, DP.max_grad_norm / float(g.norm()))
            got = rows[p, b] * min(1.0, DP.max_grad_norm / float(rows[p, b].norm()))
            torch.testing.assert_close(got, clipped, rtol=0, atol=1e-14)
            assert math.isclose(float(losses[p, b]), float(loss.detach()), abs_tol=1e-14)
    assert float(rows.norm(dim=2).max()) > DP.max_grad_norm  # the clip binds


def test_packed_dp_sgd_equals_the_sequential_per_row_reference_float64() -> None:
    """Same noise bits (seeded per center and step), per-row gradients by vmap against a loop:
    float64 parameters agree to 1e-14 after 2 rounds of Adam (measured 3e-17: the per-row gradients
    of a batched matmul and of one backward per row differ in the last bit)."""
    packed, sequential = _engines()
    a, b = packed.get_params(), sequential.get_params()
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-14
    plain, _ = _engines(dp=None)
    c = plain.get_params()
    assert max(float((a[n] - c[n]).abs().max()) for n in a) > 1e-3  # DP changed the training


def test_noise_is_keyed_by_seed_round_center_and_step() -> None:
    a = step_noise(0, 3, [4, 7], 2, 5, torch.float64)
    b = step_noise(0, 3, [7], 2, 5, torch.float64)
    assert torch.equal(a[1], b[0])  # center 7's noise whatever it is drawn with
    for other in (
        step_noise(1, 3, [4], 2, 5, torch.float64),
        step_noise(0, 4, [4], 2, 5, torch.float64),
        step_noise(0, 3, [4], 3, 5, torch.float64),
    ):
        assert not torch.equal(a[0], other[0])


def test_dp_sgd_without_noise_and_a_huge_clip_is_plain_sgd_float64() -> None:
    """sigma -> 0 (1e-300) and C = 1e10 (above every row norm): the clipped mean is the plain batch
    gradient, so DP-SGD trains like the plain engine (the sequential reference, float64)."""
    loose = DPConfig(level="sample", noise_multiplier=1e-300, max_grad_norm=1e10)
    packed, _ = _engines(dp=loose)
    _, plain = _engines(dp=None)
    a, b = packed.get_params(), plain.get_params()
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-12


class _Prox(LocalTerm):
    def loss(self, batch):  # pragma: no cover - refused before any step
        return torch.zeros(batch.x.shape[0])


@pytest.mark.parametrize("engine", [PackedEngine, SequentialEngine])
def test_dp_sgd_refuses_a_local_term_in_one_line(engine) -> None:
    with pytest.raises(ValueError, match=r"^trainer\.dp\.level=sample: .*local term _Prox") as err:
        engine().setup(
            _module(), _data(), batch_size=8, epochs=1, seed=0, dtype=torch.float64, dp=DP, local_term=_Prox()
        )
    assert "\n" not in str(err.value)
