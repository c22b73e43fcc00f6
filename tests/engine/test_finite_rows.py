"""The packed engine's divergence check: ``finite_rows`` is ``isfinite(x).all(1)``."""

from __future__ import annotations

import torch

from lightning_fed.engine.packed import finite_rows


def test_finite_rows_is_isfinite_all_including_sums_that_overflow() -> None:
    """Rows with a NaN, +inf, -inf, both infinities (their sum is NaN), finite rows whose float32 sum
    overflows (3e38 + 3e38 = inf: still finite rows) and ordinary rows, in float32, float64 and
    bfloat16; and random rows with a few non-finite entries placed at random."""
    inf, nan = float("inf"), float("nan")
    cases = [
        [1.0, 2.0, 3.0],
        [1.0, nan, 3.0],
        [inf, 0.0, 0.0],
        [-inf, 1.0, 1.0],
        [inf, -inf, 0.0],
        [3e38, 3e38, 0.0],
        [-3e38, -3e38, 3e38],
        [0.0, 0.0, 0.0],
    ]
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = torch.tensor(cases, dtype=dtype)
        assert finite_rows(x).tolist() == torch.isfinite(x).all(1).tolist()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 517, generator=gen)
    rows = torch.randint(0, 300, (40,), generator=gen)
    cols = torch.randint(0, 517, (40,), generator=gen)
    x[rows[:20], cols[:20]] = nan
    x[rows[20:30], cols[20:30]] = inf
    x[rows[30:], cols[30:]] = -inf
    x[5] = 3e38  # overflows its sum, all finite
    assert torch.equal(finite_rows(x), torch.isfinite(x).all(1))
    assert not bool(finite_rows(x).all()) and bool(finite_rows(x)[5])
