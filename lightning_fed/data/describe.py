"""A per-center table of a federation: what ``lightning-fed data describe`` prints and saves.

One row per center: name, train/val/test sizes, positive rate of each split, the share of
imputed values (from the ``*_missing`` indicator columns a source adds, 0 when it adds none), and
the metadata descriptor entries ``v0..v{d-1}`` (ABPS Sec. 4.1: positive rate, log n_train, mean
year / 2030, then the Charlson prevalences).
"""

from __future__ import annotations

import polars as pl
import torch

from lightning_fed.data.center import FederatedData

__all__ = ["describe"]


def describe(data: FederatedData) -> pl.DataFrame:
    """The federation as a polars DataFrame, one row per center (in center-id order)."""
    missing_cols = [i for i, n in enumerate(data.feature_names) if n.endswith("_missing")]
    rows = []
    for c in data.centers:
        x = torch.cat([c.x_train, c.x_val, c.x_test])
        row = {
            "center": c.name,
            "n_train": c.n_train,
            "n_val": int(c.y_val.numel()),
            "n_test": int(c.y_test.numel()),
            "pos_rate_train": float(c.y_train.mean()) if c.y_train.numel() else float("nan"),
            "pos_rate_val": float(c.y_val.mean()) if c.y_val.numel() else float("nan"),
            "pos_rate_test": float(c.y_test.mean()) if c.y_test.numel() else float("nan"),
            "missing_share": float(x[:, missing_cols].mean()) if missing_cols and len(x) else 0.0,
        }
        row.update({f"v{k}": float(v) for k, v in enumerate(c.metadata.tolist())})
        rows.append(row)
    return pl.DataFrame(rows)
