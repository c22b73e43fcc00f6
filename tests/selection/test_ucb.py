"""UCB of Eq. 7."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.selection.abps import ucb


def test_first_round_has_no_exploration_bonus() -> None:
    mean = torch.tensor([[0.5, 0.3], [0.7, 0.5]], dtype=torch.float64)
    assert torch.equal(ucb(mean, torch.zeros(2, 2), t=1, gamma=math.sqrt(2)), mean)  # log 1 = 0


def test_values_match_closed_form() -> None:
    """gamma = sqrt(2), t = 4: bonus = sqrt(2) sqrt(2 ln 4 / (n + 1)) = 2 sqrt(ln 4 / (n + 1)).

    n = 0: 2 sqrt(ln 4) = 2.3548200450309493; n = 3: sqrt(ln 4) = 1.1774100225154747.
    """
    mean = torch.tensor([0.4, 0.4, 0.9], dtype=torch.float64)
    count = torch.tensor([0.0, 3.0, 3.0], dtype=torch.float64)
    out = ucb(mean, count, t=4, gamma=math.sqrt(2))
    expected = torch.tensor(
        [0.4 + 2.3548200450309493, 0.4 + 1.1774100225154747, 0.9 + 1.1774100225154747], dtype=torch.float64
    )
    assert torch.allclose(out, expected, atol=1e-12, rtol=0)
    assert torch.equal(ucb(mean, count, t=4, gamma=0.0), mean)


def test_invalid_arguments() -> None:
    z = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="1-based"):
        ucb(z, z, t=0, gamma=1.0)
    with pytest.raises(ValueError, match="gamma"):
        ucb(z, z, t=2, gamma=-1.0)
    with pytest.raises(ValueError, match="shape"):
        ucb(z, torch.zeros(3, 3), t=2, gamma=1.0)
