"""Repeated evaluation in the report: fold runs pooled per label and seed into out-of-fold AUROCs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
import torch

from lightning_fed.metrics.delong import delong_interval
from lightning_fed.reporting import report, table1
from lightning_fed.reporting.folds import pool_folds
from lightning_fed.reporting.runs import read_runs
from lightning_fed.reporting.tables.table1 import runs_frame, runs_with_centers

# Two centers, k = 2 folds, one seed. Per method and fold, per center: (labels, logits) of the test fold.
# fedavg, center A: fold 0 (1,0,0 | 0.9,0.1,0.5), fold 1 (1,0 | 0.2,0.3). Pooled: positives {0.9, 0.2},
#   negatives {0.1, 0.5, 0.3}: 0.9 beats 3, 0.2 beats 1 -> AUROC 4/6. (The folds alone: 1.0 and 0.0.)
# fedavg, center B: fold 0 (0,0 | 0.0,1.0) undefined alone, fold 1 (1,1,0 | 2.0,0.8,0.7). Pooled:
#   positives {2.0, 0.8}, negatives {0.0, 1.0, 0.7}: 2.0 beats 3, 0.8 beats 2 -> 5/6.
# local, A: positives {0.1, 0.2}, negatives {0.9, 0.5, 0.3} -> 0/6; B: positives {0.5, 0.8},
#   negatives {0.0, 1.0, 0.7}: 0.5 beats 1, 0.8 beats 2 -> 3/6.
# Center-paired difference fedavg - local: A 4/6, B 2/6, mean 0.5 over 2 pairs.
# fedavg pooled over both centers: positives {0.9, 0.2, 2.0, 0.8} against the 6 negatives
#   {0.1, 0.5, 0.3, 0.0, 1.0, 0.7}: 5 + 2 + 6 + 5 = 18 of 24 -> 0.75.
FOLDS = {
    "fedavg": [
        {"A": ([1, 0, 0], [0.9, 0.1, 0.5]), "B": ([0, 0], [0.0, 1.0])},
        {"A": ([1, 0], [0.2, 0.3]), "B": ([1, 1, 0], [2.0, 0.8, 0.7])},
    ],
    "local": [
        {"A": ([1, 0, 0], [0.1, 0.9, 0.5]), "B": ([0, 0], [0.0, 1.0])},
        {"A": ([1, 0], [0.2, 0.3]), "B": ([1, 1, 0], [0.5, 0.8, 0.7])},
    ],
}
FOLD_AUROC = {"fedavg": [1.0, 0.5], "local": [0.0, 0.5]}  # each fold's own mean over defined centers


def _fold_run(root: Path, label: str, fold: int, k: int = 2, seed: int = 0) -> Path:
    run = root / f"{label}-seed{seed}-fold{fold}"
    run.mkdir(parents=True)
    summary = {"label": label, "method": label, "seed": seed, "fold": fold, "folds": k}
    summary |= {"test_auroc_mean": FOLD_AUROC[label][fold], "bytes_vs_fedavg": 1.0 + fold, "rounds": 2}
    summary |= {"wall_seconds": 1.0, "num_centers": 2, "robust_min_per_class": 2}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = []
    for c, (name, (labels, logits)) in enumerate(FOLDS[label][fold].items()):
        for r, (y, z) in enumerate(zip(labels, logits, strict=True)):
            rows.append({"center": c, "name": name, "split": "test", "row": r, "label": y, "logit": z})
            rows.append({"center": c, "name": name, "split": "val", "row": r, "label": y, "logit": -z})
    frame = pl.DataFrame(rows).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("source_row"),
        (1 / (1 + (-pl.col("logit")).exp())).alias("probability"),
    )
    frame.write_parquet(run / "predictions.parquet")
    pl.DataFrame({"center": [0, 1], "name": ["A", "B"], "n_train": [10 + fold, 20]}).write_parquet(
        run / "centers.parquet"
    )
    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for label in FOLDS:
        for fold in range(2):
            _fold_run(tmp_path / "runs", label, fold)
    return tmp_path / "runs"


def test_fold_runs_are_not_duplicates_and_pool_into_one_record(root: Path) -> None:
    records = read_runs(root)
    frame = runs_frame(records)  # same label and seed, different folds: no refusal
    assert frame.height == 4 and frame["fold"].to_list() == [0, 1, 0, 1]
    pooled = pool_folds(records)
    assert [(r.label, r.seed, r.folds, r.fold) for r in pooled] == [
        ("fedavg", 0, 2, None),
        ("local", 0, 2, None),
    ]


def test_pooled_out_of_fold_aurocs_match_the_hand_computation(root: Path) -> None:
    fedavg = next(r for r in pool_folds(read_runs(root)) if r.label == "fedavg")
    centers = fedavg.centers
    assert centers["test_auroc"].to_list() == pytest.approx([4 / 6, 5 / 6])
    assert centers["test_n"].to_list() == [5, 5]
    assert centers["test_positives"].to_list() == [2, 2] and centers["test_negatives"].to_list() == [3, 3]
    assert centers["test_robust"].to_list() == [True, True] and centers["n_train"].to_list() == [10, 20]
    # DeLong on the hand-pooled rows of center A (positives first, as pooled fold by fold)
    logits = torch.tensor([[0.9, 0.1, 0.5, 0.2, 0.3]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0]])
    _, low, high = delong_interval(logits, y, torch.ones_like(y, dtype=torch.bool))
    assert centers["test_auroc_low"][0] == pytest.approx(float(low[0]))
    assert centers["test_auroc_high"][0] == pytest.approx(float(high[0]))
    s = fedavg.summary
    assert s["test_auroc_mean"] == pytest.approx(0.75) and s["test_auroc_pooled"] == pytest.approx(0.75)
    assert s["test_auroc_robust"] == pytest.approx(0.75) and s["test_auroc_robust_centers"] == 2
    assert s["test_auroc_undefined"] == 0 and s["bytes_vs_fedavg"] == pytest.approx(1.5)


def test_table1_uses_the_out_of_fold_aurocs_and_pairs_by_center(root: Path) -> None:
    table = table1(runs_with_centers(pool_folds(read_runs(root))), reference="local")
    fedavg = table.filter(pl.col("method") == "fedavg").row(0, named=True)
    assert fedavg["auroc_mean"] == pytest.approx(0.75) and fedavg["n_seeds"] == 1
    assert fedavg["center_diff"] == pytest.approx(0.5) and fedavg["center_pairs"] == 2
    assert fedavg["folds"] == 2
    local = table.filter(pl.col("method") == "local").row(0, named=True)
    assert local["auroc_mean"] == pytest.approx(0.25)


def test_report_writes_folds_csv_and_the_pooled_tables(root: Path, tmp_path: Path) -> None:
    written = report(root, tmp_path / "out", reference="local")
    folds = pl.read_csv(written["folds.csv"])
    assert folds.height == 4 and sorted(folds["test_auroc_mean"].to_list()) == [0.0, 0.5, 0.5, 1.0]
    runs = pl.read_csv(written["runs.csv"])
    assert runs.height == 2 and runs["test_auroc_mean"].to_list() == pytest.approx([0.75, 0.25])
    text = written["table1.md"].read_text()
    assert "data.split.folds = 2" in text and "out-of-fold" in text
    centers = pl.read_csv(written["centers.csv"])  # the reference's per-center out-of-fold support
    assert centers["test_auroc"].to_list() == pytest.approx([0.0, 0.5])


def test_a_missing_or_repeated_fold_is_refused_in_one_line(root: Path) -> None:
    import shutil

    shutil.rmtree(root / "local-seed0-fold1")
    with pytest.raises(ValueError, match=r"'local' seed 0 has 1 of its 2 folds \(missing \[1\]\)") as err:
        pool_folds(read_runs(root))
    assert "\n" not in str(err.value)
    shutil.copytree(root / "local-seed0-fold0", root / "local-copy")
    with pytest.raises(ValueError, match="are the same fold of method 'local' seed 0"):
        pool_folds(read_runs(root))


def test_a_fold_run_without_predictions_is_refused(root: Path) -> None:
    (root / "fedavg-seed0-fold1" / "predictions.parquet").unlink()
    with pytest.raises(ValueError, match=r"no predictions\.parquet, needed to pool the 2 folds of 'fedavg'"):
        pool_folds(read_runs(root))


def test_runs_without_folds_pool_to_themselves(tmp_path: Path) -> None:
    run = tmp_path / "fedavg-seed0"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"label": "fedavg", "seed": 0, "test_auroc_mean": 0.7}))
    records = read_runs(tmp_path)
    assert pool_folds(records) == records and "fold" not in runs_frame(records).columns
    assert not math.isnan(runs_frame(records)["test_auroc_mean"][0])
