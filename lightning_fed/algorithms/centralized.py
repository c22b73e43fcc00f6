"""Centralized: one model on the pooled training splits of all centers (the paper's upper bound).

Not a federated method: it is what the data would give if it could be pooled. The features are
standardized with the pooled train statistics (a pooled cohort need not standardize per center,
which federated centers must do to keep their rows private), one model trains on the union of
every center's train split, and it is evaluated on every center's own test split. Nothing is
booked on the ledger: the pooled rows are the counterfactual, not a transfer the federation would
make. ``configs/centralized.yaml`` adds validation early stopping, as any pooled model would be
tuned.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData, pooled_standardization
from lightning_fed.types import RoundContext

__all__ = ["Centralized"]


class Centralized(Algorithm):
    """Train a single model on all centers' training rows."""

    def prepare(self, data: FederatedData) -> FederatedData:
        return pooled_standardization(data)

    def train_groups(self, data: FederatedData) -> list[list[int]]:
        return [list(range(data.num_centers))]

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        return params
