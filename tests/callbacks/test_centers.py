"""``centers.parquet``: one row per center with its support and DeLong interval; the summary's averages."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import CentersWriter
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


def test_centers_parquet_has_support_and_intervals_matching_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "centers.parquet"
    fed = Federation(
        make_federation([30, 20, 200, 400]),
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=1, local_epochs=1, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[CentersWriter(path)]),
    )
    summary = fed.fit()
    frame = pl.read_parquet(path)
    assert frame.height == 4 and frame["name"].to_list() == [c.name for c in fed.data.centers]
    for split in ("val", "test"):
        assert (frame[f"{split}_positives"] + frame[f"{split}_negatives"] == frame[f"{split}_n"]).all()
    assert frame["test_n"].to_list() == [len(c.y_test) for c in fed.data.centers]
    auroc = frame["test_auroc"].to_numpy()
    defined = ~np.isnan(auroc)
    assert math.isclose(float(auroc[defined].mean()), summary["test_auroc_mean"], rel_tol=1e-12)
    low, high = frame["test_auroc_low"].to_numpy(), frame["test_auroc_high"].to_numpy()
    two_each = (frame["test_positives"] >= 2) & (frame["test_negatives"] >= 2)
    has = two_each.to_numpy() & defined
    assert np.all((low[has] <= auroc[has]) & (auroc[has] <= high[has]))
    assert np.isnan(low[~has]).all()
    robust = frame["test_robust"].to_numpy() & defined
    assert summary["test_auroc_robust_centers"] == int(robust.sum()) and summary["robust_min_per_class"] == 2
    if robust.any():
        assert math.isclose(summary["test_auroc_robust"], float(auroc[robust].mean()), rel_tol=1e-12)
    n = frame["test_n"].to_numpy()
    weighted = float((auroc[defined] * n[defined]).sum() / n[defined].sum())
    assert math.isclose(summary["test_auroc_weighted"], weighted, rel_tol=1e-12)
    assert frame["test_auroc_fragile"].sum() == summary["test_auroc_fragile"]
