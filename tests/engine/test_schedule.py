"""The seeded batch schedule: epochs, or a fixed number of local updates per round."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.engine.schedule import center_batches, steps_per_round
from lightning_fed.types import TrainerConfig


def test_fixed_steps_are_the_first_batches_of_successive_epochs() -> None:
    """n = 5, B = 2: 3 batches per epoch (the third holds one row and one pad). 4 steps = the 3 batches
    of epoch 1 and the first of epoch 2, i.e. exactly the 2-epoch schedule cut after 4 batches."""
    two_epochs = center_batches(5, 2, 2, seed=3, round_idx=1, center=4)
    four = center_batches(5, 2, 1, seed=3, round_idx=1, center=4, steps=4)
    assert four.shape == (4, 2) and torch.equal(four, two_epochs[:4])
    assert sorted(four[:3].flatten().tolist()) == [-1, 0, 1, 2, 3, 4]
    # Fewer steps than one epoch: a prefix of that epoch; more: as many epochs as needed.
    assert torch.equal(center_batches(5, 2, 1, 3, 1, 4, steps=2), two_epochs[:2])
    assert center_batches(1, 8, 1, 0, 0, 0, steps=3).tolist() == [[0] + [-1] * 7] * 3
    assert steps_per_round(5, 2, 2) == 6 and steps_per_round(5, 2, 2, steps=10) == 10
    assert steps_per_round(0, 2, 2, steps=10) == 0
    assert center_batches(0, 2, 1, 0, 0, 0, steps=3).shape == (0, 2)


def test_local_steps_is_validated() -> None:
    assert TrainerConfig(local_steps=10).local_steps == 10 and TrainerConfig().local_steps is None
    with pytest.raises(ValueError, match=r"trainer\.local_steps must be >= 1"):
        TrainerConfig(local_steps=0)
