"""Local-only: every center trains on its own data and exchanges nothing (the lower bound)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.types import RoundContext

__all__ = ["LocalOnly"]


class LocalOnly(Algorithm):
    """No collaboration: parameters are returned unchanged and nothing is sent (0 bytes)."""

    #: Audited (:meth:`Algorithm.replay_blocker`): each center keeps its own rows.
    owner_rows_suffice: ClassVar[bool] = True

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        return params

    def newcomer_weights(self, data: FederatedData, metadata: Tensor, peers: int) -> Tensor | None:
        """None: a center that trains alone receives nothing; a newcomer starts from the seeded
        initialization every center started from (its fine-tuned rows are "train alone for k steps")."""
        return None
