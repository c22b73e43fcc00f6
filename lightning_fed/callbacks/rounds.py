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
    touching the center), ``train/<name>`` for each value the model's own ``training_step`` logs
    (the center's row-weighted round mean), ``val/<name>`` / ``test/<name>`` for each value its own
    ``validation_step`` / ``test_step`` logs (the center's epoch mean on the rounds that evaluate that
    split; :mod:`lightning_fed.engine.eval_step`), plus the round's algorithm statistics (same value
    for every center).
    ``val_auroc`` / ``test_auroc`` are NaN where a center's AUROC is undefined (one class in its
    split) and null on the rounds that did not evaluate that split (``trainer.eval_every > 1``:
    test at rounds ``k - 1, 2k - 1, ...`` and the last; see :mod:`lightning_fed.federation`).
    Each ``metrics:`` entry of the config adds ``val_<name>`` and ``test_<name>`` the same way
    (NaN where the center's split does not define it;
    :mod:`lightning_fed.metrics.torchmetrics_per_center`).

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
        c = result.train_loss.shape[0]
        columns: dict[str, Any] = {
            "round": [result.round] * c,
            "center": list(range(c)),
            "name": [center.name for center in federation.data.centers],
            "train_loss": result.train_loss.double().numpy(),
            "val_auroc": _per_center(result.val_auroc, c),
            "test_auroc": _per_center(result.test_auroc, c),
            "bytes": result.bytes_per_center.numpy(),
            **{
                f"{split}/{n}": v.double().numpy()
                for split, logged in (
                    ("train", result.train_logged),
                    ("val", result.val_logged),
                    ("test", result.test_logged),
                )
                for n, v in logged.items()
            },
        }
        names = getattr(federation, "metrics", None)
        for split, values in (("val", result.val_metrics), ("test", result.test_metrics)):
            for name in names.names if names else ():
                columns[f"{split}_{name}"] = _per_center(None if values is None else values.get(name), c)
        columns.update({k: [float(v)] * c for k, v in result.stats.items()})
        self.frames.append(pl.DataFrame(columns))
        if federation.fabric.is_global_zero:
            self._write()

    def _write(self) -> None:
        frame = pl.concat(self.frames, how="diagonal_relaxed")
        self.frames = [frame]
        with atomic_path(self.path) as tmp:
            frame.write_parquet(tmp)


def _per_center(values: Any, c: int) -> Any:
    """A float64 column of ``c`` values: the round's per-center metric, or nulls when not evaluated."""
    if values is None:
        return pl.Series(values=[None] * c, dtype=pl.Float64)
    return values.double().numpy()
