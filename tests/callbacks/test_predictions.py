"""``predictions.parquet``: every evaluated row's label and probability, consistent with the summary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import CentersWriter, PredictionsWriter
from lightning_fed.data import TeacherICU
from lightning_fed.data.split import Split
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


def _fit(data, tmp_path: Path, module=None) -> tuple[Federation, dict]:
    fed = Federation(
        data,
        MortalityMLP(hidden=(8,), dropout=0.0) if module is None else module,
        FedAvg(),
        TrainerConfig(rounds=2, local_epochs=1, batch_size=32),
        fabric=Fabric(
            accelerator="cpu",
            devices=1,
            callbacks=[
                CentersWriter(tmp_path / "centers.parquet"),
                PredictionsWriter(tmp_path / "predictions.parquet"),
            ],
        ),
    )
    return fed, fed.fit()


def test_predictions_auroc_is_sklearns_and_the_summarys(tmp_path: Path) -> None:
    """Per center and split, sklearn's ``roc_auc_score`` on the file's labels and probabilities equals
    ``centers.parquet``'s AUROC (NaN where one class is absent), and over every test row it equals the
    summary's pooled AUROC; the row counts equal the splits' sizes."""
    metrics = pytest.importorskip("sklearn.metrics")
    fed, summary = _fit(make_federation([30, 20, 200, 400]), tmp_path)
    preds = pl.read_parquet(tmp_path / "predictions.parquet")
    centers = pl.read_parquet(tmp_path / "centers.parquet")
    assert preds["source_row"].null_count() == preds.height  # hand-built centers: no source rows
    for split in ("val", "test"):
        for c, center in enumerate(fed.data.centers):
            rows = preds.filter((pl.col("center") == c) & (pl.col("split") == split)).sort("row")
            y = getattr(center, f"y_{split}").numpy()
            assert rows["row"].to_list() == list(range(len(y)))
            np.testing.assert_array_equal(rows["label"].to_numpy(), y.astype(int))
            expected = centers[f"{split}_auroc"][c]
            if len(np.unique(y)) < 2:
                assert math.isnan(expected)
                continue
            got = metrics.roc_auc_score(rows["label"].to_numpy(), rows["probability"].to_numpy())
            assert math.isclose(got, expected, abs_tol=1e-9), (split, c)
    test = preds.filter(pl.col("split") == "test")
    pooled = metrics.roc_auc_score(test["label"].to_numpy(), test["logit"].to_numpy())
    assert math.isclose(pooled, summary["test_auroc_pooled"], abs_tol=1e-9)


def test_source_rows_are_the_pooled_tables_rows(tmp_path: Path) -> None:
    """A table source records each row's position in its pooled table: the labels there are the
    file's labels, and with folds the test rows are that fold's."""
    source = TeacherICU(num_centers=3, num_stays=400, min_stays=40, split=Split(folds=3, fold=1))
    _fit(source.build(0), tmp_path)
    preds = pl.read_parquet(tmp_path / "predictions.parquet")
    table = source.table(0)
    assert preds["source_row"].null_count() == 0
    np.testing.assert_array_equal(table.y[preds["source_row"].to_numpy()], preds["label"].to_numpy())


def _macro_ovr(y: np.ndarray, p: np.ndarray, metrics) -> float:
    """sklearn's one-vs-rest AUROC of each class with both labels in ``y``, averaged (NaN without one):
    ``roc_auc_score(multi_class="ovr", average="macro")`` where every class occurs."""
    per_class = [
        metrics.roc_auc_score(y == k, p[:, k]) for k in range(p.shape[1]) if 0 < (y == k).sum() < len(y)
    ]
    return float(np.mean(per_class)) if per_class else math.nan


def test_multiclass_predictions_hold_class_logits_and_give_the_centers_numbers(tmp_path: Path) -> None:
    """A digits federation writes each row's ten class logits and softmax probabilities; per center
    and split, the macro one-vs-rest AUROC and accuracy over them are ``centers.parquet``'s."""
    metrics = pytest.importorskip("sklearn.metrics")
    import torch

    from lightning_fed.data import Digits
    from lightning_fed.models import SmallCNN

    data = Digits(num_clients=3, max_per_client=60, transforms=False).build(0)
    fed, _ = _fit(data, tmp_path, SmallCNN(width=8, groups=2, embed_dim=16))
    preds = pl.read_parquet(tmp_path / "predictions.parquet")
    centers = pl.read_parquet(tmp_path / "centers.parquet")
    assert "logit" not in preds.columns and set(preds["logits"].list.len().to_list()) == {10}
    assert preds["source_row"].null_count() == 0
    for split in ("val", "test"):
        for c, center in enumerate(fed.data.centers):
            rows = preds.filter((pl.col("center") == c) & (pl.col("split") == split)).sort("row")
            y = getattr(center, f"y_{split}").numpy().astype(int)
            np.testing.assert_array_equal(rows["label"].to_numpy(), y)
            z = np.array(rows["logits"].to_list())
            p = np.array(rows["probabilities"].to_list())
            np.testing.assert_allclose(p, torch.tensor(z).softmax(-1).numpy(), atol=1e-12)
            expected = centers[f"{split}_auroc"][c]
            got = _macro_ovr(y, p, metrics)
            assert (math.isnan(got) and math.isnan(expected)) or math.isclose(got, expected, abs_tol=1e-9)
            accuracy = metrics.accuracy_score(y, z.argmax(1))
            assert math.isclose(accuracy, centers[f"{split}_accuracy"][c], abs_tol=1e-12), (split, c)
