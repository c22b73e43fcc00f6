"""Each center's final support and interval as ``centers.parquet`` (polars), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from lightning_fed.callbacks.base import FinalFileWriter
from lightning_fed.io import atomic_path

__all__ = ["CentersWriter", "write_centers"]


def write_centers(path: str | Path, federation: Any) -> Path:
    """Write :meth:`Federation.center_rows <lightning_fed.federation.Federation.center_rows>` (the
    evaluation of the federation's last ``summary()``) to ``path`` atomically.

    The one writer of ``centers.parquet``: ``fit`` calls it when the fit ends, ``lightning-fed test``
    after re-evaluating the checkpoint (so a run written before the file existed gains it).

    Returns:
        ``path``.
    """
    path = Path(path)
    frame = pl.DataFrame(federation.center_rows())
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)
    return path


class CentersWriter(FinalFileWriter):
    """Write one row per center of the final evaluation when the fit ends (rank 0 only).

    Columns are :meth:`Federation.center_rows <lightning_fed.federation.Federation.center_rows>`'s:
    the center's rows, positives and negatives per split, its AUROC with the DeLong (1988) 95 %
    interval, whether that AUROC is fragile (one case of a class) or robust (at least
    ``trainer.robust_min_per_class`` of each), accuracy and balanced accuracy. The numbers are those
    of ``summary.json`` (the same final evaluation).

    Args:
        path: Target parquet file.
    """

    def write(self, path: Path, federation: Any) -> None:
        write_centers(path, federation)
