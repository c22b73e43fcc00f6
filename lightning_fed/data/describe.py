"""A per-center table of a federation: what ``lightning-fed data describe`` prints and saves.

One row per center: name, train/val/test sizes, then the label columns that fit the task, the
share of imputed values (from the ``*_missing`` indicator columns a source adds, 0 when it adds
none), and the metadata descriptor entries under the names the source gives them
(:attr:`FederatedData.metadata_names <lightning_fed.data.center.FederatedData.metadata_names>`;
``v0..v{d-1}`` when it gives none):

- binary labels (the clinical tables): the positive rate of each split;
- K > 2 classes (image federations): the number of classes present in the train split and the
  share of its most frequent class (the descriptor is then the train class histogram).
"""

from __future__ import annotations

import polars as pl
import torch
from torch import Tensor

from lightning_fed.data.center import CenterData, FederatedData

__all__ = ["describe", "shown_columns"]


def _rate(y: Tensor) -> float:
    return float(y.mean()) if y.numel() else float("nan")


def _label_columns(c: CenterData, num_classes: int) -> dict[str, float | int]:
    if num_classes <= 2:
        return {f"pos_rate_{split}": _rate(getattr(c, f"y_{split}")) for split in ("train", "val", "test")}
    counts = torch.bincount(c.y_train.long(), minlength=num_classes)
    total = int(counts.sum())
    return {
        "classes": int((counts > 0).sum()),
        "majority_share": float(counts.max()) / total if total else float("nan"),
    }


def describe(data: FederatedData) -> pl.DataFrame:
    """The federation as a polars DataFrame, one row per center (in center-id order)."""
    missing_cols = [i for i, n in enumerate(data.feature_names) if n.endswith("_missing")]
    names = list(data.metadata_names)
    rows = []
    for c in data.centers:
        x = torch.cat([c.x_train, c.x_val, c.x_test]) if missing_cols else None
        row = {
            "center": c.name,
            "n_train": c.n_train,
            "n_val": int(c.y_val.numel()),
            "n_test": int(c.y_test.numel()),
            **_label_columns(c, data.num_classes),
            "missing_share": float(x[:, missing_cols].mean()) if x is not None and len(x) else 0.0,
        }
        values = c.metadata.tolist()
        row.update({names[k] if k < len(names) else f"v{k}": float(v) for k, v in enumerate(values)})
        rows.append(row)
    return pl.DataFrame(rows)


def shown_columns(table: pl.DataFrame, data: FederatedData, descriptors: int = 3) -> list[str]:
    """The columns worth printing: sizes, the label columns, missingness (when a source imputes),
    and the first ``descriptors`` descriptor entries."""
    label = ["pos_rate_train"] if data.num_classes <= 2 else ["classes", "majority_share"]
    missing = ["missing_share"] if any(n.endswith("_missing") for n in data.feature_names) else []
    fixed = {"center", "n_train", "n_val", "n_test", "pos_rate_val", "pos_rate_test", *label, "missing_share"}
    meta = [c for c in table.columns if c not in fixed][:descriptors]
    return ["center", "n_train", "n_val", "n_test", *label, *missing, *meta]
