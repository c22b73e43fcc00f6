"""Each evaluated row's label and predicted probability as ``predictions.parquet``, written atomically.

The rows behind ``centers.parquet``'s AUROCs: with ``data.split.folds`` the report pools a center's
test rows over its ``k`` fold runs and computes the out-of-fold AUROC from them
(:mod:`lightning_fed.reporting.folds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from lightning_fed.callbacks.base import FinalFileWriter
from lightning_fed.io import atomic_path

__all__ = ["PREDICTION_SCHEMA", "PredictionsWriter", "prediction_frame", "write_predictions"]

#: Columns of ``predictions.parquet``, one row per evaluated row of a center's split.
PREDICTION_SCHEMA: dict[str, pl.DataType] = {
    "center": pl.Int64(),
    "name": pl.String(),
    "split": pl.String(),
    "row": pl.Int64(),
    "source_row": pl.Int64(),
    "label": pl.Int64(),
    "logit": pl.Float64(),
    "probability": pl.Float64(),
}


def prediction_frame(federation: Any) -> pl.DataFrame:
    """One row per validation and test row of every center, from the evaluations of the last
    ``summary()`` (the round the summary and ``centers.parquet`` report; evaluated now when there is
    none).

    Columns (:data:`PREDICTION_SCHEMA`): ``center`` (id), ``name``, ``split`` (``val`` / ``test``),
    ``row`` (position within that center's split), ``source_row`` (the row's position in the source's
    pooled table, :attr:`CenterData.row_ids <lightning_fed.data.center.CenterData.row_ids>`; null
    when the source does not say), ``label`` (0/1), ``logit`` and ``probability`` (``sigmoid(logit)``,
    computed in float64). Empty for multi-class models (no single probability per row).
    """
    evaluations = getattr(federation, "final_evaluations", None) or {
        "test": federation.evaluate("test"),
        "val": federation.evaluate("val"),
    }
    parts = []
    for split in ("val", "test"):
        logit = evaluations[split].logit
        if logit is None:
            return pl.DataFrame(schema=PREDICTION_SCHEMA)
        padded = federation.val if split == "val" else federation.test
        mask = padded.mask.cpu()
        sizes = mask.sum(1).tolist()
        centers = federation.data.centers
        ids = [c.row_ids.get(split) for c in centers]
        source = [
            np.full(n, -1, dtype=np.int64) if r is None else np.asarray(r, dtype=np.int64)
            for r, n in zip(ids, sizes, strict=True)
        ]
        values = logit.detach().cpu().double()[mask]
        parts.append(
            pl.DataFrame(
                {
                    "center": np.repeat(np.arange(len(centers), dtype=np.int64), sizes),
                    "name": np.repeat(np.array([c.name for c in centers], dtype=object), sizes).tolist(),
                    "split": [split] * int(sum(sizes)),
                    "row": np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]),
                    "source_row": np.concatenate(source),
                    "label": padded.y.cpu()[mask].round().long().numpy(),
                    "logit": values.numpy(),
                    "probability": torch.sigmoid(values).numpy(),
                },
                schema=PREDICTION_SCHEMA,
            ).with_columns(pl.when(pl.col("source_row") >= 0).then(pl.col("source_row")).alias("source_row"))
        )
    return pl.concat(parts)


def write_predictions(path: str | Path, federation: Any) -> Path:
    """Write :func:`prediction_frame` to ``path`` atomically (nothing for a multi-class model).

    Returns:
        ``path``.
    """
    path = Path(path)
    frame = prediction_frame(federation)
    if frame.height:
        with atomic_path(path) as tmp:
            frame.write_parquet(tmp)
    return path


class PredictionsWriter(FinalFileWriter):
    """Write every evaluated row's label and probability when the fit ends (rank 0 only;
    :func:`prediction_frame`).

    Args:
        path: Target parquet file.
    """

    def write(self, path: Path, federation: Any) -> None:
        write_predictions(path, federation)
