"""End to end, multi-class: ``fit`` a digits federation with ``--data.split.folds=2`` for each fold and
two methods, then ``report`` pools the class logits into out-of-fold macro one-vs-rest AUROCs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lightning_fed.cli import main
from tests.cli.fold_runs import fit_folds

pytestmark = pytest.mark.cli  # drives the CLI end to end

ROWS = 150  # per center
TINY = [
    "--data.class_path=lightning_fed.data.Digits",
    "--data.init_args.num_clients=2",
    "--data.init_args.partition=lightning_fed.data.IID",  # every class in every center
    "--data.init_args.transforms=false",
    f"--data.init_args.max_per_client={ROWS}",
    "--model.class_path=lightning_fed.models.SmallCNN",
    "--model.init_args.width=8",
    "--model.init_args.groups=2",
    "--model.init_args.embed_dim=16",
    "--trainer.rounds=2",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]
METHODS = {"fedavg": "FedAvg", "local": "LocalOnly"}


def _oof(root: Path, label: str) -> pl.DataFrame:
    return pl.concat(
        pl.read_parquet(root / f"{label}-seed1-fold{f}" / "predictions.parquet").filter(
            pl.col("split") == "test"
        )
        for f in range(2)
    )


def test_two_multiclass_folds_then_report_pools_class_logits(tmp_path: Path) -> None:
    """Every center's two test folds are disjoint and cover its rows; the report's per-center
    out-of-fold AUROC, accuracy and balanced accuracy are sklearn's over the pooled rows (macro
    one-vs-rest on the stored softmax probabilities), its support counts ten classes, and the
    method's mean is the mean of those AUROCs; the pooled AUROC is NaN as for a single multi-class run."""
    metrics = pytest.importorskip("sklearn.metrics")
    root = tmp_path / "runs"
    fit_folds(root, TINY, METHODS, folds=2, seed=1)
    main(["report", str(root), "--reference", "local"])
    out = root / "report"
    centers = pl.read_csv(out / "centers.csv").sort("center")  # the reference's out-of-fold numbers
    assert centers.height == 2
    expected: dict[str, dict[str, list[float]]] = {}
    for label in METHODS:
        oof = _oof(root, label)
        assert set(oof["logits"].list.len().to_list()) == {10}
        probabilities = np.array(oof["probabilities"].to_list())
        np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-12)
        numbers: dict[str, list[float]] = {"auroc": [], "accuracy": [], "balanced_accuracy": []}
        for center in range(2):
            rows = oof.filter(pl.col("center") == center)
            assert rows.height == ROWS and rows["source_row"].n_unique() == ROWS  # disjoint, cover
            y, p = rows["label"].to_numpy(), np.array(rows["probabilities"].to_list())
            assert len(np.unique(y)) == 10
            numbers["auroc"].append(metrics.roc_auc_score(y, p, multi_class="ovr", average="macro"))
            numbers["accuracy"].append(metrics.accuracy_score(y, p.argmax(1)))
            numbers["balanced_accuracy"].append(metrics.balanced_accuracy_score(y, p.argmax(1)))
            if label == "local":
                row = centers.row(center, named=True)
                assert row["test_n"] == ROWS and row["test_negatives"] == int((y == 0).sum())
                assert row["test_positives"] == int((y == 1).sum())
                assert row["test_robust"] == (np.bincount(y, minlength=10).min() >= 2)
        expected[label] = numbers
    np.testing.assert_allclose(centers["test_auroc"].to_numpy(), expected["local"]["auroc"], atol=1e-9)
    runs = pl.read_csv(out / "runs.csv")
    assert runs.height == 2 and runs["folds"].to_list() == [2, 2]
    for label in METHODS:
        got = runs.filter(pl.col("method") == label).row(0, named=True)
        for key, values in expected[label].items():
            assert got[f"test_{key}_mean"] == pytest.approx(float(np.mean(values)), abs=1e-9), (label, key)
        assert got["test_auroc_pooled"] is None or np.isnan(got["test_auroc_pooled"])
    assert pl.read_csv(out / "folds.csv").height == 4
    summary = json.loads((root / "fedavg-seed1-fold1" / "summary.json").read_text())
    assert (summary["fold"], summary["folds"]) == (1, 2)
    table = (out / "table1.md").read_text()
    assert "data.split.folds = 2" in table and "vs local by center" in table
