"""Affine clip (Eq. 5) and Beta posterior (Eq. 6)."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.selection.abps import BetaPosterior, clip_utility


def test_clip_maps_the_paper_interval_onto_unit_interval() -> None:
    phi = torch.tensor([-0.2, -0.1, 0.0, 0.05, 0.1, 0.3], dtype=torch.float64)
    expected = torch.tensor([0.0, 0.0, 0.5, 0.75, 1.0, 1.0], dtype=torch.float64)
    assert torch.allclose(clip_utility(phi), expected, atol=1e-12)
    assert float(clip_utility(0.0)) == 0.5  # python float in, phi = 0 sits exactly at tau_acc
    assert torch.allclose(clip_utility(torch.tensor([0.0]), -0.2, 0.2), torch.tensor([0.5]))


def test_clip_rejects_an_empty_interval() -> None:
    with pytest.raises(ValueError, match="phi_min"):
        clip_utility(0.0, 0.1, 0.1)


def test_update_and_mean_match_closed_form() -> None:
    """Prior Beta(2, 3): mean 2 / 5 = 0.4.

    Center 0 observes peer 1 twice in one call (0.25, then 1.0) and center 1 observes peer 2 once
    (0.5): alpha[0, 1] = 2 + 1.25 = 3.25, beta[0, 1] = 3 + 0.75 + 0 = 3.75, n = 2, mean 3.25 / 7;
    alpha[1, 2] = 2.5, beta[1, 2] = 3.5, n = 1, mean 2.5 / 6. Beliefs are directed: [1, 0] and
    [2, 1] keep the prior.
    """
    post = BetaPosterior(3, alpha0=2.0, beta0=3.0)
    assert torch.allclose(post.mean(), torch.full((3, 3), 0.4, dtype=torch.float64))
    post.update(torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2]), torch.tensor([0.25, 1.0, 0.5]))
    assert post.alpha.dtype == post.beta.dtype == post.count.dtype == torch.float64
    assert post.alpha[0, 1].item() == 3.25 and post.beta[0, 1].item() == 3.75
    assert post.count[0, 1].item() == 2.0 and post.count[1, 2].item() == 1.0
    assert post.alpha[1, 2].item() == 2.5 and post.beta[1, 2].item() == 3.5
    mean = post.mean()
    assert mean[0, 1].item() == pytest.approx(3.25 / 7)
    assert mean[1, 2].item() == pytest.approx(2.5 / 6)
    assert mean[1, 0].item() == mean[2, 1].item() == pytest.approx(0.4)
    assert post.count.sum().item() == 3.0
    post.update(torch.tensor([0]), torch.tensor([1]), clip_utility(torch.tensor([-0.05])))  # 0.25
    assert post.alpha[0, 1].item() == 3.5 and post.beta[0, 1].item() == 4.5


def test_state_dict_round_trip() -> None:
    post = BetaPosterior(4)
    post.update(torch.tensor([3, 2]), torch.tensor([0, 1]), torch.tensor([0.9, 0.1]))
    other = BetaPosterior(4)
    other.load_state_dict(post.state_dict())
    for name in ("alpha", "beta", "count"):
        assert torch.equal(getattr(other, name), getattr(post, name))
    with pytest.raises(ValueError, match="alpha"):
        BetaPosterior(5).load_state_dict(post.state_dict())


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="alpha0"):
        BetaPosterior(3, alpha0=0.0)
    with pytest.raises(ValueError, match="beta0"):
        BetaPosterior(3, beta0=-1.0)
    post = BetaPosterior(3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        post.update(torch.tensor([0]), torch.tensor([1]), torch.tensor([1.5]))
    with pytest.raises(ValueError, match="itself"):
        post.update(torch.tensor([1]), torch.tensor([1]), torch.tensor([0.5]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        post.update(torch.tensor([0]), torch.tensor([3]), torch.tensor([0.5]))
    with pytest.raises(ValueError, match="lengths"):
        post.update(torch.tensor([0, 1]), torch.tensor([1]), torch.tensor([0.5]))
