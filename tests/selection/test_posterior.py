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
    with pytest.raises(ValueError, match="4 centers, not 5"):
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


class _DensePosterior:
    """The dense ``[C, C]`` posterior before issue 17 (update and mean verbatim): the reference."""

    def __init__(self, c: int, alpha0: float = 1.0, beta0: float = 1.0) -> None:
        self.alpha = torch.full((c, c), float(alpha0), dtype=torch.float64)
        self.beta = torch.full((c, c), float(beta0), dtype=torch.float64)
        self.count = torch.zeros((c, c), dtype=torch.float64)

    def update(self, i: torch.Tensor, j: torch.Tensor, phi_bar: torch.Tensor) -> None:
        self.alpha.index_put_((i, j), phi_bar, accumulate=True)
        self.beta.index_put_((i, j), 1.0 - phi_bar, accumulate=True)
        self.count.index_put_((i, j), torch.ones_like(phi_bar), accumulate=True)

    def mean(self) -> torch.Tensor:
        return self.alpha / (self.alpha + self.beta)


def _observations(g: torch.Generator, c: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    i = torch.randint(0, c, (n,), generator=g)
    j = (i + torch.randint(1, c, (n,), generator=g)) % c
    return i, j, torch.rand(n, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("c", [2, 7, 300])
def test_sparse_posterior_equals_the_dense_reference_bit_for_bit(c: int) -> None:
    """Rounds of observations, repeated pairs within and across calls (accumulated in order): the
    sparse store's dense views, means and row blocks equal the dense matrices exactly."""
    g = torch.Generator().manual_seed(c)
    post, ref = BetaPosterior(c, 1.5, 0.7), _DensePosterior(c, 1.5, 0.7)
    for _ in range(6):
        i, j, phi = _observations(g, c, 4 * c)
        post.update(i, j, phi)
        ref.update(i, j, phi)
        for name in ("alpha", "beta", "count"):
            assert torch.equal(getattr(post, name), getattr(ref, name)), name
        assert torch.equal(post.mean(), ref.mean())
        rows = torch.randperm(c, generator=g)[: max(1, c // 3)]
        assert torch.equal(post.mean_rows(rows), ref.mean()[rows])
    assert len(post.pairs) == int((ref.count > 0).sum())  # only observed pairs are stored
    assert post.pairs.keys.dtype == torch.int64 and bool((post.pairs.keys[1:] > post.pairs.keys[:-1]).all())


def test_a_dense_checkpoint_from_before_issue_17_loads_losslessly() -> None:
    g = torch.Generator().manual_seed(3)
    ref = _DensePosterior(9, 2.0, 3.0)
    ref.update(*_observations(g, 9, 40))
    old = {"alpha": ref.alpha, "beta": ref.beta, "count": ref.count, "alpha0": 2.0, "beta0": 3.0}
    post = BetaPosterior(9)
    post.load_state_dict(old)
    assert (post.alpha0, post.beta0) == (2.0, 3.0)
    for name in ("alpha", "beta", "count"):
        assert torch.equal(getattr(post, name), getattr(ref, name))
    i, j, phi = _observations(g, 9, 30)  # and it goes on as the dense one would
    post.update(i, j, phi)
    ref.update(i, j, phi)
    assert torch.equal(post.alpha, ref.alpha) and torch.equal(post.count, ref.count)
    again = BetaPosterior(9)
    again.load_state_dict(post.state_dict())
    assert torch.equal(again.beta, ref.beta)
    with pytest.raises(ValueError, match=r"must be \[4, 4\]"):
        BetaPosterior(4).load_state_dict(old)


def test_sparse_state_is_small() -> None:
    """3 observations on 1,000 centers: 3 stored pairs, not 10^6 (the dense state was 24 MB)."""
    post = BetaPosterior(1000)
    post.update(
        torch.tensor([0, 5, 999]), torch.tensor([1, 6, 0]), torch.tensor([0.5, 0.2, 1.0], dtype=torch.float64)
    )
    state = post.state_dict()["pairs"]
    assert state["keys"].tolist() == [1, 5 * 1000 + 6, 999 * 1000]
    assert state["alpha"].tolist() == [1.5, 1.2, 2.0] and state["count"].tolist() == [1.0, 1.0, 1.0]
