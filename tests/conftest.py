"""Shared fixtures: small federations made by the tests themselves."""

from __future__ import annotations

import os

import pytest
import torch

from lightning_fed.data.center import CenterData, FederatedData

# Tests run on 2 cores next to other work: one intra-op thread keeps timings sane and results stable.
torch.set_num_threads(1)
# ... and Federation's trainer.threads: auto keeps it (lightning_fed.threads: the environment's setting wins).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def make_federation(sizes: list[int], num_features: int = 6, seed: int = 0) -> FederatedData:
    """Centers with a shared linear signal; ``sizes`` are train sizes (val/test get half as many)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(num_features, generator=gen)
    centers = []
    for c, n in enumerate(sizes):
        m = max(4, n // 2)

        def draw(k: int) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.randn(k, num_features, generator=gen)
            p = torch.sigmoid(x @ w)
            y = (torch.rand(k, generator=gen) < p).float()
            y[0], y[1] = 0.0, 1.0  # both classes present
            return x, y

        (xt, yt), (xv, yv), (xs, ys) = draw(n), draw(m), draw(m)
        meta = torch.tensor(
            [float(yt.mean()), float(torch.log(torch.tensor(float(n)))), 1.05], dtype=torch.float64
        )
        centers.append(CenterData(f"c{c}", xt, yt, xv, yv, xs, ys, meta))
    return FederatedData(tuple(centers), tuple(f"f{i}" for i in range(num_features)))


@pytest.fixture
def small_federation() -> FederatedData:
    return make_federation([40, 7, 130, 3, 64, 200, 18, 9])
