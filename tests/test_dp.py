"""The Gaussian mechanism on metadata descriptors: sigma, sensitivity, clipping, noise, seeds."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.privacy import GaussianMechanism, descriptor_sensitivity, noisy_descriptors
from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.filter import candidate_mask


def _meta(c: int = 4, d: int = 15) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    meta = torch.rand(c, d, generator=gen, dtype=torch.float64) * 0.3
    meta[:, 1] = torch.log(torch.tensor([50.0, 100.0, 400.0, 2000.0][:c], dtype=torch.float64))
    meta[:, 2] = 2150.0 / 2030.0
    return meta


def test_sigma_closed_form() -> None:
    mech = GaussianMechanism(epsilon=0.5, delta=1e-5, clip=100.0, year_span=1.0)
    n = torch.tensor([10, 100, 1000])
    delta2 = torch.sqrt(torch.tensor(13.0 + (1.0 / 2030.0) ** 2, dtype=torch.float64)) / n
    expected = math.sqrt(2 * math.log(1.25 / 1e-5)) * delta2 / 0.5
    torch.testing.assert_close(mech.sigma(n, 15), expected)
    base = torch.sqrt(torch.tensor(1.0 + (1.0 / 2030.0) ** 2, dtype=torch.float64)) / n
    torch.testing.assert_close(mech.sensitivity(n, 3), base)


def test_sensitivity_is_the_worst_replacement() -> None:
    """Replacing one patient (label, year in the window, all flags) moves each entry by at most Delta_k."""
    n, d = 20, 15
    gen = torch.Generator().manual_seed(1)
    y = (torch.rand(n, generator=gen) < 0.5).double()
    year = 2150.0 + torch.randint(0, 2, (n,), generator=gen).double()
    flags = (torch.rand(n, 12, generator=gen) < 0.3).double()

    def descriptor(y, year, flags):
        return torch.cat(
            [
                torch.stack([y.mean(), torch.log(torch.tensor(n, dtype=torch.float64)), year.mean() / 2030]),
                flags.mean(0),
            ]
        )

    v = descriptor(y, year, flags)
    y2, year2, flags2 = y.clone(), year.clone(), flags.clone()
    y2[0], year2[0], flags2[0] = 1 - y[0], 4301 - year[0], 1 - flags[0]  # the worst swap
    diff = (descriptor(y2, year2, flags2) - v).abs()
    bound = descriptor_sensitivity(torch.tensor([n]), d)[0]
    assert (diff <= bound + 1e-15).all()
    torch.testing.assert_close(diff, bound)


def test_clipping_per_entry_and_l2() -> None:
    meta = _meta()
    meta[0, 0] = 1.7
    bounds = [1.0] * 15
    bounds[1] = 10.0
    mech = GaussianMechanism(0.5, 1e-5, clip=bounds)
    clipped = mech.clip_descriptors(meta)
    assert clipped[0, 0] == 1.0 and (clipped >= 0).all() and (clipped <= torch.tensor(bounds)).all()
    l2 = GaussianMechanism(0.5, 1e-5, clip=0.5)
    out = l2.clip_descriptors(meta)
    private = torch.ones(15, dtype=torch.bool)
    private[1] = False
    assert (out[:, private].norm(dim=1) <= 0.5 + 1e-12).all()
    torch.testing.assert_close(out[:, 1], meta[:, 1])  # log n_train (public) is left alone
    # A tiny clip bounds the sensitivity for a tiny center: 2c.
    assert float(l2.sensitivity(torch.tensor([1]), 15)[0]) == pytest.approx(1.0)
    tiny = GaussianMechanism(0.5, 1e-5, clip=[0.01] * 15)
    assert float(tiny.sensitivity(torch.tensor([1]), 15)[0]) == pytest.approx(
        math.sqrt(13 * 0.01**2 + (1 / 2030) ** 2)
    )


def test_noise_statistics_match_sigma() -> None:
    mech = GaussianMechanism(0.9, 1e-5, clip=100.0)
    meta = _meta(c=2)
    n = torch.tensor([50, 400])
    draws = torch.stack([mech.apply(meta, n, torch_generator(0, "test-dp", k)) for k in range(2000)])
    noise = draws - meta
    sigma = mech.sigma(n, 15)
    std = noise.std(dim=0)
    assert torch.allclose(std[:, 0], sigma, rtol=0.08)
    assert torch.allclose(std[:, 5], sigma, rtol=0.08)
    assert noise.mean(dim=0).abs().max() < 4 * float(sigma.max()) / math.sqrt(2000)
    assert (noise[:, :, 1] == 0).all()  # log n_train is public


def test_same_seed_same_noise_other_seed_different() -> None:
    mech = GaussianMechanism(0.5, 1e-5, clip=100.0)
    meta, n = _meta(), torch.tensor([50, 100, 400, 2000])
    a = noisy_descriptors(meta, n, mech, seed=3)
    assert torch.equal(a, noisy_descriptors(meta, n, mech, seed=3))
    assert not torch.equal(a, noisy_descriptors(meta, n, mech, seed=4))
    # Each center's noise is its own stream: dropping center 0 leaves the others' draws.
    torch.testing.assert_close(
        noisy_descriptors(meta[1:], n[1:], mech, seed=3)[0],
        mech.apply(meta[1:2], n[1:2], torch_generator(3, "dp-metadata", 0))[0],
    )
    assert a.dtype == torch.float64 and a.shape == meta.shape


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"epsilon": 1.0, "delta": 1e-5, "clip": 1.0}, "epsilon"),
        ({"epsilon": 0.0, "delta": 1e-5, "clip": 1.0}, "epsilon"),
        ({"epsilon": 2.0, "delta": 1e-5, "clip": 1.0}, "Thm A.1"),
        ({"epsilon": 0.5, "delta": 0.0, "clip": 1.0}, "delta"),
        ({"epsilon": 0.5, "delta": 1.0, "clip": 1.0}, "delta"),
        ({"epsilon": 0.5, "delta": 1e-5, "clip": 0.0}, "clip"),
        ({"epsilon": 0.5, "delta": 1e-5, "clip": []}, "clip"),
        ({"epsilon": 0.5, "delta": 1e-5, "clip": [1.0, float("inf")]}, "clip"),
        ({"epsilon": 0.5, "delta": 1e-5, "clip": 1.0, "year_span": -1.0}, "year_span"),
    ],
)
def test_validation_errors_name_the_setting(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GaussianMechanism(**kwargs)


def test_apply_validates_its_inputs() -> None:
    mech = GaussianMechanism(0.5, 1e-5, clip=[1.0, 10.0, 2.0])
    gen = torch.Generator().manual_seed(0)
    meta = _meta(c=2)[:, :3]
    with pytest.raises(ValueError, match="n_train"):
        mech.apply(meta, torch.tensor([10]), gen)
    with pytest.raises(ValueError, match="n_train"):
        mech.apply(meta, torch.tensor([10, 0]), gen)
    with pytest.raises(ValueError, match="NaN"):
        mech.apply(torch.full((2, 3), float("nan")), torch.tensor([10, 10]), gen)
    with pytest.raises(ValueError, match="3 bounds"):
        mech.apply(_meta(c=2), torch.tensor([10, 10]), gen)


def test_goal_filter_on_noisy_descriptors_tends_to_the_exact_one_as_n_grows() -> None:
    """sigma ~ 1/n: for huge centers the noisy candidate sets are the exact ones; for small ones not."""
    meta = _meta(c=4)
    meta = torch.cat([meta, meta * 1.3, meta * 0.6])  # 12 centers with distinct directions
    meta[:, 1] = torch.linspace(3.0, 8.0, 12, dtype=torch.float64)
    mech = GaussianMechanism(0.5, 1e-5, clip=[1.0, 20.0, 2.0, *([1.0] * 12)])
    exact = candidate_mask(mech.clip_descriptors(meta), "homogeneity", keep_fraction=0.25)
    big = noisy_descriptors(meta, torch.full((12,), 10**9), mech, seed=0)
    assert torch.equal(candidate_mask(big, "homogeneity", keep_fraction=0.25), exact)
    small = noisy_descriptors(meta, torch.full((12,), 5), mech, seed=0)
    assert not torch.equal(candidate_mask(small, "homogeneity", keep_fraction=0.25), exact)
