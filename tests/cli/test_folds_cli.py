"""End to end: ``fit`` with ``--data.split.folds=3`` for each fold and two methods, then ``report``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lightning_fed.cli import main
from tests.cli.fold_runs import fit_folds

pytestmark = pytest.mark.cli  # drives the CLI end to end

TINY = [
    "--data.class_path=lightning_fed.data.TeacherICU",
    "--data.init_args.num_centers=4",
    "--data.init_args.num_stays=600",
    "--model.init_args.hidden=[8]",
    "--trainer.rounds=2",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]
METHODS = {"fedavg": "FedAvg", "local": "LocalOnly"}


def test_three_folds_then_report_pools_out_of_fold_predictions(tmp_path: Path) -> None:
    """Every center's three test folds are disjoint and cover its rows (source rows), and the
    report's per-center AUROC is sklearn's over the pooled out-of-fold predictions."""
    metrics = pytest.importorskip("sklearn.metrics")
    root = tmp_path / "runs"
    fit_folds(root, TINY, METHODS, folds=3, seed=3)
    summary = json.loads((root / "fedavg-seed3-fold2" / "summary.json").read_text())
    assert (summary["fold"], summary["folds"], summary["seed"]) == (2, 3, 3)
    preds = {
        fold: pl.read_parquet(root / f"fedavg-seed3-fold{fold}" / "predictions.parquet").filter(
            pl.col("split") == "test"
        )
        for fold in range(3)
    }
    oof = pl.concat(preds.values())
    for center in range(4):
        rows = [set(p.filter(pl.col("center") == center)["source_row"].to_list()) for p in preds.values()]
        assert sum(map(len, rows)) == len(set().union(*rows))  # disjoint
        val = pl.read_parquet(root / "fedavg-seed3-fold0" / "predictions.parquet").filter(
            (pl.col("center") == center) & (pl.col("split") == "val")
        )
        assert set(val["source_row"].to_list()) <= set().union(
            *rows
        )  # fold 0's val rows are tested elsewhere
    main(["report", str(root), "--reference", "local"])
    out = root / "report"
    centers = pl.read_csv(out / "centers.csv").sort("center")  # the reference's out-of-fold numbers
    local = pl.concat(
        pl.read_parquet(root / f"local-seed3-fold{f}" / "predictions.parquet").filter(
            pl.col("split") == "test"
        )
        for f in range(3)
    )
    expected = []
    for center in range(4):
        rows = local.filter(pl.col("center") == center)
        assert centers["test_n"][center] == rows.height
        y = rows["label"].to_numpy()
        expected.append(
            metrics.roc_auc_score(y, rows["probability"].to_numpy()) if 0 < y.sum() < len(y) else np.nan
        )
    np.testing.assert_allclose(centers["test_auroc"].to_numpy(), expected, atol=1e-9)
    runs = pl.read_csv(out / "runs.csv")
    assert runs.height == 2 and runs["folds"].to_list() == [3, 3]
    fedavg = oof.group_by("center").agg(pl.col("label"), pl.col("logit"))
    per_center = [
        metrics.roc_auc_score(y, z)
        for y, z in zip(fedavg["label"], fedavg["logit"], strict=True)
        if 0 < sum(y) < len(y)
    ]
    got = runs.filter(pl.col("method") == "fedavg")["test_auroc_mean"][0]
    assert got == pytest.approx(float(np.mean(per_center)), abs=1e-9)
    assert pl.read_csv(out / "folds.csv").height == 6
    table = (out / "table1.md").read_text()
    assert "data.split.folds = 3" in table and "vs local by center" in table
