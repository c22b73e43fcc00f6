"""The seeded batch schedule: epochs, or a fixed number of local updates per round."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.engine.schedule import center_batches, check_schedule, steps_per_round
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


@pytest.mark.parametrize(
    ("batch_size", "epochs", "steps", "named"),
    [
        (10**12, 2, None, r"trainer\.batch_size=1000000000000 with trainer\.local_epochs=2"),
        (128, 10**9, None, r"trainer\.local_epochs=1000000000 gives the largest center \(236"),
        (128, 1, 10**9, r"trainer\.local_steps=1000000000"),
    ],
)
def test_a_schedule_too_large_to_build_is_refused_in_one_line(
    batch_size: int, epochs: int, steps: int | None, named: str
) -> None:
    """Issue 32 item 5: ``trainer.batch_size=1e12`` ended in an allocator traceback and
    ``local_epochs=1e9`` in a round that never ends; both engines' ``setup`` refuse them first."""
    from lightning_fed.engine.packed import PackedEngine
    from lightning_fed.engine.sequential import SequentialEngine
    from lightning_fed.models import MortalityMLP

    train = [(torch.zeros(n, 4), torch.zeros(n)) for n in (236, 12)]
    for engine in (PackedEngine(), SequentialEngine()):
        with pytest.raises(ValueError, match=named) as err:
            engine.setup(
                MortalityMLP(4, hidden=[2]), train, batch_size=batch_size, epochs=epochs, seed=0, steps=steps
            )
        assert "\n" not in str(err.value)
    check_schedule([236, 12], 10**6, 2)  # full batch at any sensible size is legal


def test_an_empty_federation_has_nothing_to_schedule() -> None:
    check_schedule([], 10**12, 10**9)
