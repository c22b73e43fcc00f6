"""Each evaluated row's label and predicted probability as ``predictions.parquet``, written atomically.

The rows behind ``centers.parquet``'s AUROCs: with ``data.split.folds`` the report pools a center's
test rows over its ``k`` fold runs and computes the out-of-fold AUROC from them
(:mod:`lightning_fed.reporting.folds`). Binary models write one logit and probability per row
(:data:`PREDICTION_SCHEMA`); multi-class models (logits ``[C, n, K]``) the row's ``K`` class logits
and their softmax probabilities as list columns (:data:`MULTICLASS_PREDICTION_SCHEMA`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from lightning_fed.callbacks.base import FinalFileWriter
from lightning_fed.io import atomic_path

__all__ = [
    "MULTICLASS_PREDICTION_SCHEMA",
    "PREDICTION_SCHEMA",
    "PredictionsWriter",
    "prediction_frame",
    "write_predictions",
]

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

#: Columns of ``predictions.parquet`` for a multi-class model: :data:`PREDICTION_SCHEMA`'s first six,
#: then each row's ``K`` class logits and ``softmax`` probabilities (float64 lists of length ``K``).
MULTICLASS_PREDICTION_SCHEMA: dict[str, pl.DataType] = {
    **{k: v for k, v in PREDICTION_SCHEMA.items() if k not in ("logit", "probability")},
    "logits": pl.List(pl.Float64()),
    "probabilities": pl.List(pl.Float64()),
}


def prediction_frame(federation: Any) -> pl.DataFrame:
    """One row per validation and test row of every center, from the evaluations of the last
    ``summary()`` (the round the summary and ``centers.parquet`` report; evaluated now when there is
    none).

    Columns (:data:`PREDICTION_SCHEMA`): ``center`` (id), ``name``, ``split`` (``val`` / ``test``),
    ``row`` (position within that center's split), ``source_row`` (the row's position in the source's
    pooled table, :attr:`CenterData.row_ids <lightning_fed.data.center.CenterData.row_ids>`; null
    when the source does not say), ``label`` (0/1), ``logit`` and ``probability`` (``sigmoid(logit)``,
    computed in float64). Multi-class models (:data:`MULTICLASS_PREDICTION_SCHEMA`): ``label`` is the
    class id ``0..K-1`` and ``logit`` / ``probability`` are replaced by the lists ``logits`` (the
    ``K`` class logits) and ``probabilities`` (``softmax(logits)``, in float64, summing to 1, the
    scores sklearn's ``roc_auc_score(multi_class="ovr")`` expects). Empty when the evaluations kept
    no logits.
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
        columns, mask = _row_columns(federation, split)
        values = logit.detach().cpu().double()[mask]  # [rows] binary, [rows, K] multi-class
        if values.dim() == 2:
            as_list = pl.List(pl.Float64())
            columns["logits"] = pl.Series(values.numpy()).cast(as_list)
            columns["probabilities"] = pl.Series(values.softmax(-1).numpy()).cast(as_list)
            schema = MULTICLASS_PREDICTION_SCHEMA
        else:
            columns["logit"] = values.numpy()
            columns["probability"] = torch.sigmoid(values).numpy()
            schema = PREDICTION_SCHEMA
        parts.append(
            pl.DataFrame(columns, schema=schema).with_columns(
                pl.when(pl.col("source_row") >= 0).then(pl.col("source_row")).alias("source_row")
            )
        )
    return pl.concat(parts)


def _row_columns(federation: Any, split: str) -> tuple[dict[str, Any], torch.Tensor]:
    """A split's identifying columns (``center`` to ``label``; ``source_row`` -1 where unknown) and
    its padded row mask ``[C, n]``."""
    padded = federation.val if split == "val" else federation.test
    mask = padded.mask.cpu()
    sizes = mask.sum(1).tolist()
    centers = federation.data.centers
    ids = [c.row_ids.get(split) for c in centers]
    source = [
        np.full(n, -1, dtype=np.int64) if r is None else np.asarray(r, dtype=np.int64)
        for r, n in zip(ids, sizes, strict=True)
    ]
    columns = {
        "center": np.repeat(np.arange(len(centers), dtype=np.int64), sizes),
        "name": np.repeat(np.array([c.name for c in centers], dtype=object), sizes).tolist(),
        "split": [split] * int(sum(sizes)),
        "row": np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]),
        "source_row": np.concatenate(source),
        "label": padded.y.cpu()[mask].round().long().numpy(),
    }
    return columns, mask


def write_predictions(path: str | Path, federation: Any) -> Path:
    """Write :func:`prediction_frame` to ``path`` atomically (nothing when it is empty).

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
    """Write every evaluated row's label and probabilities when the fit ends (rank 0 only;
    :func:`prediction_frame`).

    Args:
        path: Target parquet file.
    """

    def write(self, path: Path, federation: Any) -> None:
        write_predictions(path, federation)
