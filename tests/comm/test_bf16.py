"""bfloat16 wire hook (ABPS Sec. 6.4, extension Q)."""

from __future__ import annotations

import torch

from lightning_fed.comm.bf16 import BFloat16Hook
from lightning_fed.comm.wire import Wire


def _values(n: int = 20000) -> torch.Tensor:
    """float32 values with random signs over magnitudes 1e-30 .. 1e30 (normal range)."""
    g = torch.Generator().manual_seed(0)
    exponent = torch.rand(n, generator=g, dtype=torch.float64) * 60 - 30
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (sign * 10.0**exponent).float()


def test_round_trip_relative_error_is_at_most_unit_roundoff() -> None:
    hook = BFloat16Hook()
    x = _values()
    payload = {"w": x.reshape(4, -1), "zero": torch.zeros(4, 3)}
    encoded = hook.encode(payload)
    assert encoded["w"].dtype == torch.bfloat16
    out = hook.decode(encoded, payload)
    assert out["w"].dtype == torch.float32 and out["w"].shape == (4, 5000)
    rel = ((out["w"].double() - x.reshape(4, -1).double()).abs() / x.reshape(4, -1).double().abs()).max()
    assert rel <= 2.0**-8  # 8 significant bits, round to nearest: unit roundoff 2^-8
    assert rel > 2.0**-9  # and the bound is tight: 2^-9 would be wrong
    assert torch.equal(out["zero"], payload["zero"])


def test_decode_restores_each_senders_dtype_and_passes_integers() -> None:
    hook = BFloat16Hook()
    payload = {
        "a": torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(2, 6),
        "n": torch.arange(6).reshape(2, 3),
        "h": torch.ones(2, 2, dtype=torch.float16),
    }
    encoded = hook.encode(payload)
    assert encoded["n"].dtype == torch.int64 and encoded["h"].dtype == torch.bfloat16
    out = hook.decode(encoded, payload)
    assert {k: v.dtype for k, v in out.items()} == {k: v.dtype for k, v in payload.items()}
    assert torch.equal(out["n"], payload["n"])
    assert torch.allclose(out["a"], payload["a"], rtol=2.0**-8, atol=0)


def test_ledger_bytes_halve_against_identity() -> None:
    payload = {"w": torch.randn(5, 16, 8), "b": torch.randn(5, 8)}
    src, dst = torch.arange(5), torch.tensor([1, 2, 3, 4, 0])
    plain, half = Wire(), Wire(BFloat16Hook())
    plain.send(payload, src, dst, 0)
    out = half.send(payload, src, dst, 0)
    assert plain.ledger.total() == 5 * (16 * 8 + 8) * 4
    assert half.ledger.total() * 2 == plain.ledger.total()
    assert out["w"].dtype == torch.float32
    assert torch.allclose(out["w"], payload["w"], rtol=2.0**-8, atol=0)
