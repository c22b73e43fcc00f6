"""A local term sees global center ids in both engines, also on a shard of the federation.

FedDRM's source loss labels each row with its center's id, and MOON keys its previous models by it
(:class:`~lightning_fed.engine.objective.TermBatch` ``centers``). On a shard (a process training
centers [1, 3) of three, ``center_ids=range(1, 3)``) the ids must be 1 and 2, not the local 0 and 1,
or every row of the shard gets another center's label.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.objective import LocalTerm, TermBatch
from tests.engine.test_lr_schedule import _module, _train_sets


class RecordCenters(LocalTerm):
    """A zero term that records the center ids of every batch it is given."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def loss(self, batch: TermBatch) -> Tensor:
        self.seen.update(int(c) for c in batch.centers)
        return batch.mask.sum(1) * 0.0


@pytest.mark.parametrize("engine", [PackedEngine, SequentialEngine])
def test_local_term_gets_global_center_ids_on_a_shard(engine: type) -> None:
    term = RecordCenters()
    shard = engine()
    shard.setup(
        _module(False),
        _train_sets()[1:],
        batch_size=8,
        epochs=1,
        seed=5,
        dtype=torch.float64,
        local_term=term,
        center_ids=range(1, 3),
    )
    shard.train_round(0)
    assert term.seen == {1, 2}
