"""Multi-class folds in the report: out-of-fold macro one-vs-rest AUROC, accuracy and K-class support."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lightning_fed.reporting import report
from lightning_fed.reporting.folds import pool_folds
from lightning_fed.reporting.runs import read_runs

# Two centers, three classes, k = 2 folds, one seed. Per fold and center: (labels, class logits) of the
# test fold. Center A holds every class at least twice over its pooled rows (robust at m = 2), though
# fold 0 alone has class 2 once; center B holds class 2 once (fragile, not robust), and its fold 0
# alone lacks class 2. No row of class k ties with a row of another class on class k's probability
# (sklearn ranks softmax probabilities, the package log-softmax scores: a tie between permuted
# logits can differ in the last bit).
FOLDS = [
    {
        "A": ([0, 1, 2, 0], [[2.0, 0.0, 0.0], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0], [0.5, 1.0, 0.1]]),
        "B": ([0, 0, 1], [[1.0, 0.0, 0.0], [0.0, 0.5, 0.2], [0.0, 1.0, 0.0]]),
    },
    {
        "A": (
            [1, 2, 0, 2, 1],
            [[0.2, 0.1, 0.0], [1.0, 0.0, 2.0], [0.0, 0.3, 0.1], [0.0, 1.0, 1.5], [0.0, 2.0, 1.0]],
        ),
        "B": ([1, 2, 0], [[0.3, 0.2, 0.1], [0.0, 0.0, 1.0], [0.1, 0.25, 0.3]]),
    },
]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _fold_run(root: Path, fold: int, folds: list[dict] = FOLDS, label: str = "fedavg") -> Path:
    """A fold run folder with ``summary.json``, a multi-class ``predictions.parquet`` (the writer's
    columns) and ``centers.parquet``."""
    run = root / f"{label}-seed0-fold{fold}"
    run.mkdir(parents=True)
    summary = {"label": label, "method": label, "seed": 0, "fold": fold, "folds": len(folds)}
    summary |= {"test_auroc_mean": 0.5 + fold / 10, "rounds": 2, "num_centers": 2, "robust_min_per_class": 2}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = []
    for c, (name, (labels, logits)) in enumerate(folds[fold].items()):
        for r, (y, z) in enumerate(zip(labels, logits, strict=True)):
            p = _softmax(np.array([z])).ravel().tolist()
            for split in ("test", "val"):
                rows.append(
                    {"center": c, "name": name, "split": split, "row": r, "label": y, "logits": z}
                    | {"probabilities": p}
                )
    frame = pl.DataFrame(rows).with_columns(pl.lit(None, dtype=pl.Int64).alias("source_row"))
    frame.select(
        "center", "name", "split", "row", "source_row", "label", "logits", "probabilities"
    ).write_parquet(run / "predictions.parquet")
    pl.DataFrame({"center": [0, 1], "name": ["A", "B"], "n_train": [12, 8]}).write_parquet(
        run / "centers.parquet"
    )
    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for fold in range(2):
        _fold_run(tmp_path / "runs", fold)
    return tmp_path / "runs"


def _pooled_rows(center: str) -> tuple[np.ndarray, np.ndarray]:
    """A center's labels and class probabilities over both folds."""
    y = np.concatenate([np.array(f[center][0]) for f in FOLDS])
    z = np.concatenate([np.array(f[center][1]) for f in FOLDS])
    return y, _softmax(z)


def test_pooled_multiclass_folds_match_sklearn_per_center(root: Path) -> None:
    """Per center, the out-of-fold AUROC is sklearn's macro one-vs-rest AUROC over the pooled rows,
    accuracy and balanced accuracy are sklearn's over the arg-max class, and the support counts the
    three classes (robust needs two rows of each); the summary figures follow, pooled AUROC NaN."""
    metrics = pytest.importorskip("sklearn.metrics")
    (pooled,) = pool_folds(read_runs(root))
    centers = pooled.centers
    assert centers["name"].to_list() == ["A", "B"]
    expected = {"auroc": [], "accuracy": [], "balanced_accuracy": []}
    for c, name in enumerate(("A", "B")):
        y, p = _pooled_rows(name)
        expected["auroc"].append(metrics.roc_auc_score(y, p, multi_class="ovr", average="macro"))
        expected["accuracy"].append(metrics.accuracy_score(y, p.argmax(1)))
        expected["balanced_accuracy"].append(metrics.balanced_accuracy_score(y, p.argmax(1)))
        assert centers["test_n"][c] == len(y)
        assert centers["test_negatives"][c] == int((y == 0).sum())
        assert centers["test_positives"][c] == int((y == 1).sum())
    for key, values in expected.items():
        np.testing.assert_allclose(centers[f"test_{key}"].to_numpy(), values, atol=1e-12)
    assert expected["auroc"][0] != pytest.approx(expected["auroc"][1])  # the centers differ
    assert centers["test_robust"].to_list() == [True, False]  # B: class 2 once
    assert centers["test_auroc_fragile"].to_list() == [False, True]
    assert all(
        math.isnan(v) for v in centers["test_auroc_low"].to_list() + centers["test_auroc_high"].to_list()
    )
    assert centers["n_train"].to_list() == [12, 8]
    s = pooled.summary
    n = centers["test_n"].to_numpy()
    assert s["test_auroc_mean"] == pytest.approx(np.mean(expected["auroc"]))
    assert s["test_auroc_weighted"] == pytest.approx(float((n * expected["auroc"]).sum() / n.sum()))
    assert (
        s["test_auroc_robust"] == pytest.approx(expected["auroc"][0]) and s["test_auroc_robust_centers"] == 1
    )
    assert s["test_auroc_undefined"] == 0 and s["test_auroc_fragile"] == 1
    assert math.isnan(s["test_auroc_pooled"])  # as Evaluation: no pooled AUROC for multi-class
    assert s["test_accuracy_mean"] == pytest.approx(np.mean(expected["accuracy"]))
    assert s["test_balanced_accuracy_mean"] == pytest.approx(np.mean(expected["balanced_accuracy"]))
    assert s["folds"] == 2 and s["num_centers"] == 2


def test_report_writes_the_pooled_multiclass_rows(root: Path, tmp_path: Path) -> None:
    (pooled,) = pool_folds(read_runs(root))
    written = report(root, tmp_path / "out", reference="fedavg")
    runs = pl.read_csv(written["runs.csv"])
    assert runs.height == 1 and runs["folds"].to_list() == [2]
    assert runs["test_auroc_mean"][0] == pytest.approx(pooled.summary["test_auroc_mean"])
    centers = pl.read_csv(written["centers.csv"]).sort("center")
    np.testing.assert_allclose(centers["test_auroc"].to_numpy(), pooled.centers["test_auroc"].to_numpy())
    assert pl.read_csv(written["folds.csv"]).height == 2


def test_folds_mixing_binary_and_multiclass_or_class_counts_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _fold_run(root, 0)
    binary = root / "fedavg-seed0-fold1"
    _fold_run(root, 1)
    frame = pl.read_parquet(binary / "predictions.parquet")
    frame.with_columns(
        pl.col("logits").list.get(1).alias("logit"), pl.col("probabilities").list.get(1).alias("probability")
    ).drop("logits", "probabilities").write_parquet(binary / "predictions.parquet")
    with pytest.raises(ValueError, match="fold1 of 'fedavg' seed 0 wrote binary predictions") as err:
        pool_folds(read_runs(root))
    assert "\n" not in str(err.value)
    frame.with_columns(pl.col("logits").list.concat(pl.lit([0.0]))).write_parquet(
        binary / "predictions.parquet"
    )
    with pytest.raises(ValueError, match=r"class logits of lengths \[3, 4\]"):
        pool_folds(read_runs(root))
