"""Per-round, per-center metrics and bytes as ``rounds.parquet`` (polars), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from lightning_fed.callbacks.base import Callback
from lightning_fed.io import atomic_path
from lightning_fed.types import RoundResult

__all__ = ["RoundsWriter"]


class RoundsWriter(Callback):
    """Collect one row per (round, center) and rewrite ``rounds.parquet`` after every round.

    Rewriting each round (atomically; ~230 rows a round) keeps the file complete after a kill; a
    resumed run keeps the rows of the rounds before its checkpoint and appends from there.

    Under DDP every rank collects the rows (they are identical) and only rank 0 writes the file.

    Columns: round, center, name, train_loss, val_auroc, test_auroc, bytes (this round, on edges
    touching the center), plus the round's algorithm statistics (same value for every center).

    Args:
        path: Target parquet file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.frames: list[pl.DataFrame] = []

    def on_fit_start(self, federation: Any) -> None:
        if self.path.exists() and federation.round > 0:
            self.frames = [pl.read_parquet(self.path).filter(pl.col("round") < federation.round)]

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        c = result.val_auroc.shape[0]
        columns: dict[str, Any] = {
            "round": [result.round] * c,
            "center": list(range(c)),
            "name": [center.name for center in federation.data.centers],
            "train_loss": result.train_loss.double().numpy(),
            "val_auroc": result.val_auroc.double().numpy(),
            "test_auroc": result.test_auroc.double().numpy(),
            "bytes": result.bytes_per_center.numpy(),
        }
        columns.update({k: [float(v)] * c for k, v in result.stats.items()})
        self.frames.append(pl.DataFrame(columns))
        if federation.fabric.is_global_zero:
            self._write()

    def _write(self) -> None:
        frame = pl.concat(self.frames, how="diagonal_relaxed")
        self.frames = [frame]
        with atomic_path(self.path) as tmp:
            frame.write_parquet(tmp)
