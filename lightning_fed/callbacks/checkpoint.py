"""Save the federation state (``checkpoint.pt``) atomically, every N rounds and at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_fed.callbacks.base import Callback
from lightning_fed.io import save_torch
from lightning_fed.types import RoundResult

__all__ = ["Checkpoint"]


class Checkpoint(Callback):
    """Write ``federation.state_dict()`` to ``path``.

    Args:
        path: Target file.
        every: Also save every ``every`` rounds (0: only at the end).
    """

    def __init__(self, path: str | Path, every: int = 0) -> None:
        if every < 0:
            raise ValueError(f"output.checkpoint_every must be >= 0, got {every}")
        self.path, self.every = Path(path), int(every)

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        if self.every and (result.round + 1) % self.every == 0:
            save_torch(self.path, federation.state_dict())

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        save_torch(self.path, federation.state_dict())
