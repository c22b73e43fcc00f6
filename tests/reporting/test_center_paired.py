"""Comparisons paired by center within seeds (hierarchical bootstrap), Table 1's support columns and
the reference checks, over hand-made run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting import report, table1, to_markdown
from lightning_fed.reporting.runs import read_runs
from lightning_fed.reporting.stats import center_paired_comparison, hierarchical_bootstrap
from lightning_fed.reporting.tables.table1 import runs_with_centers

NAN = float("nan")
# Per seed, per center test AUROC. Seed 0: center c2 is undefined for the reference, so only c0, c1
# pair: d = (0.05, 0.10), mean 0.075. Seed 1: d = (0.02, 0.04, 0.06), mean 0.04.
# Hand-computed: d_bar = (0.075 + 0.04) / 2 = 0.0575 over 5 center pairs; every d > 0, so every
# bootstrap mean lies in [0.02, 0.10] and the verdict is "better".
REF = {0: [0.70, 0.80, NAN], 1: [0.60, 0.70, 0.80]}
NEW = {0: [0.75, 0.90, 0.60], 1: [0.62, 0.74, 0.86]}


def _run(root: Path, label: str, seed: int, aurocs: list[float], *, parquet: str = "centers") -> Path:
    run = root / f"{label}-seed{seed}"
    run.mkdir(parents=True)
    defined = [a for a in aurocs if not math.isnan(a)]
    summary = {"label": label, "method": label, "seed": seed, "test_auroc_mean": sum(defined) / len(defined)}
    summary |= {"bytes_vs_fedavg": 1.0, "rounds": 2, "wall_seconds": 1.0, "num_centers": len(aurocs)}
    summary |= {"test_auroc_undefined": len(aurocs) - len(defined), "test_auroc_fragile": 1}
    summary |= {"test_auroc_robust": 0.7, "test_auroc_pooled": 0.8, "test_accuracy_mean": 0.9}
    summary |= {"test_balanced_accuracy_mean": 0.6, "test_auroc_robust_centers": 1}
    (run / "summary.json").write_text(json.dumps(summary))
    names = [f"c{c}" for c in range(len(aurocs))]
    if parquet == "centers":
        c = len(aurocs)
        pl.DataFrame(
            {
                "center": list(range(c)),
                "name": names,
                "n_train": [40] * c,
                "test_n": [5 + k for k in range(c)],
                "test_positives": [2, 1, 0][:c],
                "test_negatives": [3, 5, 7][:c],
                "test_auroc": aurocs,
                "test_auroc_low": [a - 0.2 if k == 0 else NAN for k, a in enumerate(aurocs)],
                "test_auroc_high": [min(1.0, a + 0.2) if k == 0 else NAN for k, a in enumerate(aurocs)],
                "test_auroc_fragile": [False, True, False][:c],
                "test_robust": [True, False, False][:c],
            }
        ).write_parquet(run / "centers.parquet")
    else:  # an older run: rounds.parquet only, the last round evaluated the test split
        c = len(aurocs)
        pl.DataFrame(
            {
                "round": [0] * c + [1] * c,
                "center": list(range(c)) * 2,
                "name": names * 2,
                "test_auroc": [0.5] * c + aurocs,
            },
            schema_overrides={"test_auroc": pl.Float64},
        ).write_parquet(run / "rounds.parquet")
    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for seed in (0, 1):
        _run(root, "fedavg", seed, REF[seed])
        _run(root, "abps", seed, NEW[seed], parquet="centers" if seed == 0 else "rounds")
    return root


def test_hand_computed_center_paired_difference(root: Path) -> None:
    records = read_runs(root)
    older = next(r for r in records if r.label == "abps" and r.seed == 1)
    assert older.centers is None and older.center_test_auroc["test_auroc"].to_list() == NEW[1]
    table = table1(runs_with_centers(records), reference="fedavg")
    row = {r["method"]: r for r in table.iter_rows(named=True)}["abps"]
    assert row["center_pairs"] == 5
    assert row["center_diff"] == pytest.approx(0.0575, abs=1e-12)
    assert 0.02 <= row["center_ci_low"] < 0.0575 < row["center_ci_high"] <= 0.10
    assert row["center_vs_ref"] == "better"
    assert row["vs_ref"] == "within noise"  # the seed-paired t interval on 2 seeds: no verdict
    # robust centers: only c0 of seed 0 is robust (seed 1 of abps predates centers.parquet): one pair
    assert row["robust_center_pairs"] == 1 and row["robust_center_diff"] == pytest.approx(0.05)
    assert row["robust_center_vs_ref"] == "n/a"
    text = to_markdown(table)
    assert "| +0.058 [" in text and "(n=5) | better |" in text and "2000 resamples" in text


def test_bootstrap_is_seeded_and_hierarchical() -> None:
    diffs = {0: [0.05, 0.10], 1: [0.02, 0.04, 0.06]}
    assert hierarchical_bootstrap(diffs, seed=3) == hierarchical_bootstrap(diffs, seed=3)
    est, low, high = hierarchical_bootstrap(diffs, resamples=4000)
    assert est == pytest.approx(0.0575) and low < est < high
    # one seed: the center bootstrap alone; one pair: no interval
    one = center_paired_comparison({0: {"a": 0.8}}, {0: {"a": 0.7}})
    assert one.n_pairs == 1 and one.mean == pytest.approx(0.1) and one.verdict == "n/a"
    mixed = center_paired_comparison({0: {"a": 0.8, "b": 0.6}}, {0: {"a": 0.7, "b": 0.7}})
    assert mixed.verdict == "within noise" and mixed.mean == pytest.approx(0.0)


def test_report_shows_the_support_columns(root: Path, tmp_path: Path) -> None:
    written = report(root, tmp_path / "out", reference="fedavg")
    text = written["table1.md"].read_text()
    header = text.splitlines()[0]
    assert (
        "| robust AUROC | pooled AUROC | accuracy | balanced acc. | undefined | fragile | robust |" in header
    )
    assert "| 0.700 | 0.800 | 0.900 | 0.600 | 0.5 / 3 | 1 / 3 | 1 / 3 |" in text  # fedavg: 1 and 0 undefined
    csv = pl.read_csv(tmp_path / "out" / "table1.csv")
    assert {"auroc_robust", "auroc_pooled", "undefined", "fragile", "center_diff"} <= set(csv.columns)
    assert csv.columns.index("diff_vs_ref") < csv.columns.index("auroc_robust")  # old columns first


def test_wrong_reference_is_an_error_before_anything_is_written(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"reference method 'fedavg-heart' is not among .*abps, fedavg"):
        report(root, tmp_path / "out", reference="fedavg-heart")
    assert not (tmp_path / "out").exists()


def test_missing_default_reference_is_said(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed in (0, 1):
        _run(root, "fedavg-heart", seed, REF[seed])
        _run(root, "abps-heart", seed, NEW[seed])
    text = report(root, tmp_path / "out")["table1.md"].read_text()
    assert "no run is labelled 'fedavg'" in text and "fedavg-heart, abps-heart" in text
    assert "--reference LABEL" in text


def test_centers_table_of_the_reference(root: Path, tmp_path: Path) -> None:
    written = report(root, tmp_path / "out", reference="fedavg")
    text = written["centers.md"].read_text()
    lines = text.splitlines()
    assert (
        lines[0]
        == "| center | train rows | test rows | deaths | survivors | test AUROC [95 % CI] | support |"
    )
    # seed 0 of fedavg, largest test split first: c2 (7 rows, undefined), c1 (6, fragile), c0 (5, robust)
    assert lines[2].startswith("| c2 | 40 | 7 | 0 | 7 | - | undefined |")
    assert lines[3].startswith("| c1 | 40 | 6 | 1 | 5 | 0.800 | fragile |")
    assert lines[4].startswith("| c0 | 40 | 5 | 2 | 3 | 0.700 [0.500, 0.900] | robust |")
    assert pl.read_csv(written["centers.csv"]).height == 6  # both seeds
