"""Shapley credit assignment (ABPS Eq. 4): exact, batched, truncated Monte-Carlo."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lightning_fed.selection.abps import (
    coalitions_exact,
    exact_shapley,
    exact_shapley_batched,
    shapley_values,
    shapley_weights,
    tmc_masks,
    tmc_permutations,
    tmc_shapley,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _table(fn, m: int) -> torch.Tensor:
    """``[2^m]`` utilities of ``fn(set_of_players)``."""
    return torch.tensor(
        [fn({k for k in range(m) if mask >> k & 1}) for mask in range(1 << m)], dtype=torch.float64
    )


def test_two_players_by_hand() -> None:
    """U(0) = 0.5, U({0}) = 0.7, U({1}) = 0.6, U({0, 1}) = 0.9 (index = bitmask).

    phi_0 = 1/2 (0.7 - 0.5) + 1/2 (0.9 - 0.6) = 0.25; phi_1 = 1/2 (0.6 - 0.5) + 1/2 (0.9 - 0.7) = 0.15.
    """
    u = torch.tensor([0.5, 0.7, 0.6, 0.9], dtype=torch.float64)
    assert torch.allclose(exact_shapley(u), torch.tensor([0.25, 0.15], dtype=torch.float64), atol=1e-12)
    assert torch.allclose(exact_shapley_batched(u[None])[0], exact_shapley(u), atol=1e-12)


def test_three_players_efficiency_symmetry_and_null_player() -> None:
    # players 0 and 1 interchangeable (+0.1 each, +0.1 together), player 2 a null player
    def u(s: set[int]) -> float:
        return 0.5 + 0.1 * (0 in s) + 0.1 * (1 in s) + 0.1 * ({0, 1} <= s)

    table = _table(u, 3)
    phi = exact_shapley(table)
    assert phi.sum().item() == pytest.approx(table[7].item() - table[0].item())
    assert phi[0].item() == pytest.approx(phi[1].item())
    assert phi[0].item() == pytest.approx(0.15)  # own 0.1 plus half the pair bonus
    assert phi[2].item() == pytest.approx(0.0)

    # player 2 now harms any coalition holding 0 or 1: symmetry of 0 and 1 must survive it
    def v(s: set[int]) -> float:
        return u(s) + 0.05 * (2 in s) - 0.08 * (2 in s and bool(s & {0, 1}))

    table = _table(v, 3)
    phi = exact_shapley(table)
    assert phi.sum().item() == pytest.approx(table[7].item() - table[0].item())
    assert phi[0].item() == pytest.approx(phi[1].item())
    # phi_2 = 0.05 - 0.08 * P(2 arrives after 0 or 1) = 0.05 - 0.08 * 2/3
    assert phi[2].item() == pytest.approx(0.05 - 0.08 * 2 / 3)


@pytest.mark.parametrize("m", [0, 1, 2, 3, 4, 5, 6])
def test_batched_equals_loop(m: int) -> None:
    tables = torch.rand(5, 1 << m, generator=_gen(m), dtype=torch.float64)
    batched = exact_shapley_batched(tables)
    assert batched.shape == (5, m)
    for b in range(5):
        assert torch.allclose(batched[b], exact_shapley(tables[b]), atol=1e-12)
    if m:  # efficiency row by row; a constant game gives 0 to everyone (columns of W sum to 0)
        assert torch.allclose(batched.sum(1), tables[:, -1] - tables[:, 0], atol=1e-12)
        assert torch.allclose(shapley_weights(m).sum(0), torch.zeros(m, dtype=torch.float64), atol=1e-12)


def test_weight_matrix_entries() -> None:
    w = shapley_weights(3)  # w(s) = s! (2 - s)! / 3!: w(0) = 1/3, w(1) = 1/6, w(2) = 1/3
    assert w.shape == (8, 3)
    assert w[0b000, 0].item() == pytest.approx(-1 / 3)  # empty: -w(0)
    assert w[0b001, 0].item() == pytest.approx(1 / 3)  # {0}: +w(0)
    assert w[0b011, 0].item() == pytest.approx(1 / 6)  # {0, 1}: +w(1)
    assert w[0b011, 2].item() == pytest.approx(-1 / 3)  # {0, 1} lacks 2: -w(2)
    assert w[0b111, 1].item() == pytest.approx(1 / 3)  # full: +w(2)


def test_coalitions_and_permutations() -> None:
    assert coalitions_exact(3) == list(range(8))
    perms = tmc_permutations(5, 50, _gen(0))
    assert perms.shape == (50, 5) and perms.dtype == torch.int64
    assert torch.equal(perms.sort(1).values, torch.arange(5).expand(50, 5))
    assert torch.equal(perms, tmc_permutations(5, 50, _gen(0)))
    assert tmc_masks(torch.tensor([[0, 1, 2], [2, 1, 0]])) == [0, 1, 3, 4, 6, 7]


def test_tmc_over_all_permutations_is_exact() -> None:
    """Averaging tol-0 marginals over all m! orders reproduces Eq. 4: the estimator is unbiased."""
    m = 4
    table = torch.rand(1 << m, generator=_gen(1), dtype=torch.float64)
    perms = torch.tensor(list(itertools.permutations(range(m))))
    assert torch.allclose(tmc_shapley(table, perms), exact_shapley(table), atol=1e-12)
    for p in perms[:5]:  # each single permutation is efficient
        assert tmc_shapley(table, p[None]).sum().item() == pytest.approx((table[-1] - table[0]).item())


def test_tmc_converges_to_exact_on_six_players() -> None:
    m = 6
    table = torch.rand(1 << m, generator=_gen(2), dtype=torch.float64) * 0.3 + 0.5
    perms = tmc_permutations(m, 4000, _gen(3))
    err = (tmc_shapley(table, perms) - exact_shapley(table)).abs().max().item()
    assert err < 0.01


def test_tmc_table_forms_agree() -> None:
    m = 6
    table = torch.rand(1 << m, generator=_gen(4), dtype=torch.float64)
    perms = tmc_permutations(m, 8, _gen(5))
    masks = tmc_masks(perms)
    assert len(masks) <= 8 * (m - 1) + 2
    as_dict = {k: float(table[k]) for k in masks}
    dense = tmc_shapley(table, perms)
    assert torch.allclose(tmc_shapley(as_dict, perms), dense, atol=1e-12)
    assert torch.allclose(tmc_shapley(lambda k: float(table[k]), perms), dense, atol=1e-12)


def test_truncation_zeroes_marginals_after_the_prefix_gets_close() -> None:
    # additive game: contributions 0.3, 0.001, 0.002 and U(empty) = 0; U(full) = 0.303
    table = _table(lambda s: 0.3 * (0 in s) + 0.001 * (1 in s) + 0.002 * (2 in s), 3)
    perm = torch.tensor([[0, 1, 2]])
    # after {0}: |0.303 - 0.3| = 0.003 <= 0.01, so players 1 and 2 get 0
    phi = tmc_shapley(table, perm, truncation_tol=0.01)
    assert torch.allclose(phi, torch.tensor([0.3, 0.0, 0.0], dtype=torch.float64), atol=1e-12)
    # tol 0 means no truncation at all
    phi = tmc_shapley(table, perm, truncation_tol=0.0)
    assert torch.allclose(phi, torch.tensor([0.3, 0.001, 0.002], dtype=torch.float64), atol=1e-12)
    # already close at the empty coalition: everything truncated
    assert tmc_shapley(table, perm, truncation_tol=0.5).abs().sum().item() == 0.0
    with pytest.raises(ValueError, match="truncation_tol"):
        tmc_shapley(table, perm, truncation_tol=-1.0)


def test_shapley_values_calls_the_batched_utility_once() -> None:
    table = torch.rand(1 << 7, generator=_gen(6), dtype=torch.float64)
    calls: list[list[int]] = []

    def batch(masks: list[int]) -> torch.Tensor:
        calls.append(list(masks))
        return table[torch.tensor(masks)]

    small = table[:8]
    phi = shapley_values(3, lambda masks: small[torch.tensor(masks)])
    assert torch.allclose(phi, exact_shapley(small), atol=1e-12)

    phi = shapley_values(7, batch, exact_max=5, num_permutations=8, generator=_gen(7))
    assert len(calls) == 1 and len(calls[0]) < 1 << 7
    perms = tmc_permutations(7, 8, _gen(7))
    assert calls[0] == tmc_masks(perms)
    assert torch.allclose(phi, tmc_shapley(table, perms), atol=1e-12)
    assert phi.sum().item() == pytest.approx((table[-1] - table[0]).item())

    assert shapley_values(0, batch).numel() == 0
    with pytest.raises(ValueError, match="generator"):
        shapley_values(7, batch, exact_max=5)


def test_bad_table_size() -> None:
    with pytest.raises(ValueError, match="2\\^m"):
        exact_shapley(torch.zeros(6))
    with pytest.raises(ValueError, match="2\\^m"):
        exact_shapley_batched(torch.zeros(2, 5))
    assert math.isclose(float(exact_shapley(torch.tensor([0.3, 0.8]))[0]), 0.5)
