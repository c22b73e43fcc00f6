"""Which rank trains which centers, and the errors raised before any training starts."""

from __future__ import annotations

import pytest

from lightning_fed.algorithms import Centralized, FedAvg
from lightning_fed.distributed import shard_bounds
from lightning_fed.engine import SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.distributed.fakes import two_ranks


def test_equal_costs_split_evenly_and_unevenly() -> None:
    """7 models on 2 ranks: running costs 0..7, target 3.5; b=3 and b=4 tie at 0.5, the smaller wins."""
    assert shard_bounds([1] * 7, 2) == [(0, 3), (3, 7)]
    assert shard_bounds([1] * 6, 3) == [(0, 2), (2, 4), (4, 6)]
    assert shard_bounds([1] * 7, 3) == [(0, 2), (2, 5), (5, 7)]
    assert shard_bounds([1] * 5, 1) == [(0, 5)]


def test_costs_balance_the_split() -> None:
    """Costs [8, 1, 1, 1, 1] on 2 ranks: prefix sums 0, 8, 9, ...; half of 12 is 6, closest prefix
    is 8 at b=1, so the expensive model trains alone."""
    assert shard_bounds([8, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    # Every rank keeps at least one model even when one model holds all the cost.
    assert shard_bounds([0, 0, 100], 3) == [(0, 1), (1, 2), (2, 3)]


def test_fewer_models_than_processes_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"3 processes .* trains only 2 models.*at most 2 processes"):
        shard_bounds([1, 1], 3)


def test_rank_without_a_center_fails_before_training() -> None:
    """Centralized trains one model: on 2 processes one rank would have nothing to train."""
    with pytest.raises(ValueError, match="a process would train no center"):
        Federation(make_federation([20, 30]), MortalityMLP(hidden=(4,)), Centralized(), fabric=two_ranks())


def test_sequential_engine_cannot_be_sharded() -> None:
    trainer = TrainerConfig(rounds=1, engine=SequentialEngine())
    with pytest.raises(
        ValueError, match=r"trainer.engine: SequentialEngine .*use lightning_fed.engine.PackedEngine"
    ):
        Federation(
            make_federation([20, 30]), MortalityMLP(hidden=(4,)), FedAvg(), trainer, fabric=two_ranks()
        )
