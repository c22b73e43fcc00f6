"""Save the federation state (``checkpoint.pt``) atomically, every N rounds and at the end.

A checkpoint holds ``federation.state_dict()`` (parameters, optimizer states, algorithm state such
as ABPS posteriors and momentum buffers, the ledger, the round index) and the state of every
stateful observer (early stopping), so ``lightning-fed fit --resume RUN_DIR`` continues exactly
where the last checkpoint left off: every random draw derives from (seed, purpose, round), so
no generator state needs saving.

Under DDP the state is gathered on every rank (``federation.state_dict()`` is a collective there:
the engine gathers every shard's optimizer state), and only rank 0 writes the file, in the
one-process layout, so a checkpoint resumes with any number of processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lightning_fed.callbacks.base import Callback
from lightning_fed.io import save_torch
from lightning_fed.types import RoundResult

__all__ = ["Checkpoint"]


class Checkpoint(Callback):
    """Write the federation's and the observers' state to ``path``.

    Args:
        path: Target file.
        every: Also save every ``every`` rounds (0: only at the end).
        stateful: Observers whose ``state_dict`` is saved too (restored in the same order).
    """

    def __init__(self, path: str | Path, every: int = 0, stateful: Sequence[Any] = ()) -> None:
        if every < 0:
            raise ValueError(f"output.checkpoint_every must be >= 0, got {every}")
        self.path, self.every = Path(path), int(every)
        self.stateful = [cb for cb in stateful if hasattr(cb, "state_dict")]

    def _save(self, federation: Any) -> None:
        state = {
            "federation": federation.state_dict(),
            "callbacks": [cb.state_dict() for cb in self.stateful],
        }
        if federation.fabric.is_global_zero:
            save_torch(self.path, state)

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        if self.every and (result.round + 1) % self.every == 0:
            self._save(federation)

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        self._save(federation)

    def restore(self, federation: Any) -> int:
        """Load ``path`` into ``federation`` and the stateful observers; returns the round reached."""
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        federation.load_state_dict(state["federation"])
        for cb, cb_state in zip(self.stateful, state["callbacks"], strict=True):
            cb.load_state_dict(cb_state)
        return federation.round
