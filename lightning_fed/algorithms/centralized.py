"""Centralized: one model on the pooled training splits of all centers (the paper's upper bound).

Not a federated method: it is what the data would give if it could be pooled. One model trains
on the union of every center's train split (batches drawn from the pooled rows) and is evaluated
on every center's own test split. Nothing is booked on the ledger: the pooled rows are the
counterfactual, not a transfer the federation would make.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.types import RoundContext

__all__ = ["Centralized"]


class Centralized(Algorithm):
    """Train a single model on all centers' training rows."""

    def train_groups(self, data: FederatedData) -> list[list[int]]:
        return [list(range(data.num_centers))]

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        return params
