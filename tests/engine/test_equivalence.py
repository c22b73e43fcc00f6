"""The packed engine against the sequential reference (torch.optim.Adam per center)."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.schedule import steps_per_round
from lightning_fed.models import MortalityMLP

# 24 centers of very uneven sizes: 1 row up to 4 batches and a bit, so at most steps the
# active prefix shrinks and short last batches are padded.
SIZES = [1, 2, 3, 5, 8, 13, 16, 17, 21, 31, 32, 33, 34, 47, 55, 63, 64, 65, 89, 100, 128, 144, 150, 233]


def _train(
    dtype: torch.dtype, sizes: list[int] = SIZES, rounds: int = 2, batch: int = 32, steps: int | None = None
) -> tuple[dict, dict]:
    gen = torch.Generator().manual_seed(0)
    train = [
        (torch.randn(n, 7, generator=gen, dtype=dtype), (torch.rand(n, generator=gen) < 0.3).to(dtype))
        for n in sizes
    ]
    torch.manual_seed(1)
    module = MortalityMLP(in_features=7, hidden=(16, 8), dropout=0.0).to(dtype)
    out = []
    for engine in (PackedEngine(), SequentialEngine()):
        engine.setup(module, train, batch_size=batch, epochs=2, seed=5, dtype=dtype, steps=steps)
        for r in range(rounds):
            engine.train_round(r)
        out.append(engine)
    return out[0], out[1]


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_packed_matches_sequential_float64() -> None:
    packed, sequential = _train(torch.float64)
    assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-10


def test_autograd_path_matches_sequential_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the hand-derived gradients, autograd through ``packed_forward``: same numbers."""
    monkeypatch.setattr(MortalityMLP, "has_packed_loss_grad", property(lambda self: False))
    packed, sequential = _train(torch.float64)
    assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-10


def test_vmap_path_matches_sequential_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Modules with neither fast path go through ``vmap(functional_call)`` and autograd: same numbers."""
    monkeypatch.setattr(MortalityMLP, "has_packed_loss_grad", property(lambda self: False))
    monkeypatch.setattr(MortalityMLP, "has_packed_forward", property(lambda self: False))
    packed, sequential = _train(torch.float64)
    assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-10


def test_packed_matches_sequential_float32() -> None:
    """float32: summation order differs (bmm vs mm), and Adam's m / sqrt(v) amplifies those last-bit
    differences on near-zero gradients; after 2 rounds of <= 16 steps the parameters stay within
    1e-4 of each other (each Adam step moves a weight by at most lr = 1e-3), i.e. a tenth of a step."""
    packed, sequential = _train(torch.float32)
    assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-4


def test_centers_step_only_when_they_have_a_batch() -> None:
    packed, _ = _train(torch.float64, rounds=1)
    expected = torch.tensor([steps_per_round(n, 32, 2) for n in SIZES])
    counts = packed.state_dict()["optimizer"]["step"]
    assert torch.equal(counts, expected)


def test_a_fixed_number_of_local_steps_matches_sequential_and_counts() -> None:
    """``steps = 5``: every center takes exactly 5 updates (1-row centers repeat their row, the 233-row
    one stops mid-epoch); both engines agree (float64)."""
    packed, sequential = _train(torch.float64, rounds=2, steps=5)
    assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-10
    counts = packed.state_dict()["optimizer"]["step"]
    assert torch.equal(counts, torch.full((len(SIZES),), 2 * 5))


def test_state_dict_round_trip() -> None:
    packed, _ = _train(torch.float64, rounds=1)
    state = packed.state_dict()
    packed.train_round(1)
    after = packed.get_params()
    packed.load_state_dict(state)
    packed.train_round(1)
    assert _max_diff(after, packed.get_params()) == 0.0


def test_dropout_masks_differ_between_centers() -> None:
    """Two identical centers with identical data still diverge under dropout (independent masks)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 5, generator=gen), (torch.rand(64, generator=gen) < 0.5).float()
    module = MortalityMLP(in_features=5, hidden=(8, 4), dropout=0.5)
    engine = PackedEngine()
    engine.setup(module, [(x, y), (x, y)], batch_size=64, epochs=1, seed=0)
    # One full batch per center: the row order differs but the mean gradient does not, so only the
    # dropout masks can make the two centers differ.
    engine.train_round(0)
    p = engine.get_params()
    assert not torch.equal(p["layers.0.weight"][0], p["layers.0.weight"][1])
