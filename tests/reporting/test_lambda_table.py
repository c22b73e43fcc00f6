"""The lambda sweep in Table 5's layout, and lambda runs kept apart in the Table 1 layout."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting.edgedrm_tables import edgedrm_rows, edgedrm_table
from lightning_fed.reporting.lambda_table import lambda_markdown, lambda_rows, lambda_table
from tests.reporting.edgedrm_config import rr4_dir03_config


def _row(router: str, rule: str, accuracy: float, calls: float) -> dict:
    return {"router": router, "prediction_rule": rule, "accuracy": accuracy, "calls_per_query": calls}


def _run(
    root: Path, lam: float, seed: int, edgedrm: float, nr: float, calls: float, reached: float | None = None
) -> None:
    run = root / f"lam{int(lam * 100):03d}-seed{seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({}))
    (run / "config.yaml").write_text(rr4_dir03_config(seed, lam))
    rows = [
        {
            "router": "EdgeDRM",
            "prediction_rule": "weighted history",
            "accuracy": edgedrm,
            "calls_per_query": calls,
        },
        {"router": "EdgeDRM", "prediction_rule": "hard terminal", "accuracy": 0.0, "calls_per_query": 9.0},
        {
            "router": "EdgeDRM-NR",
            "prediction_rule": "weighted history",
            "accuracy": nr,
            "calls_per_query": 1.0,
        },
    ]
    if reached is not None:  # tables written before source_reached existed lack the column
        rows = [r | {"source_reached": reached if r["router"] == "EdgeDRM" else 0.0} for r in rows]
    pl.DataFrame(rows).write_csv(run / "referral.csv")


def test_table_5_means_sds_and_the_paired_gain(tmp_path: Path) -> None:
    """Two lambdas x two seeds. lambda 0.1: EdgeDRM 50, 54 (mean 52, SD 2.83), NR 30, 40 (mean 35);
    the gain is per run, 20 and 14: mean 17, SD sqrt(((20-17)^2 + (14-17)^2) / 1) = 4.24, which is not
    the difference of the two SDs."""
    _run(tmp_path, 0.1, 2025, 0.50, 0.30, 2.2)
    _run(tmp_path, 0.1, 2026, 0.54, 0.40, 2.0)
    _run(tmp_path, 0.9, 2025, 0.50, 0.25, 2.1)
    _run(tmp_path, 0.9, 2026, 0.50, 0.25, 2.1)
    rows = lambda_rows(tmp_path)
    assert rows.height == 4 and sorted(set(rows["lam"])) == [0.1, 0.9]
    table = lambda_table(rows)
    low = table.filter(pl.col("lam") == 0.1).row(0, named=True)
    assert low["edgedrm_mean"] == pytest.approx(52.0) and low["edgedrm_sd"] == pytest.approx(8**0.5)
    assert low["nr_mean"] == pytest.approx(35.0) and low["gain_mean"] == pytest.approx(17.0)
    assert low["gain_sd"] == pytest.approx(18**0.5) and low["calls_mean"] == pytest.approx(2.1)
    assert low["seeds"] == 2
    md = lambda_markdown(table)
    assert "| 0.10 | 52.00 ± 2.83 | 35.00 ± 7.07 | 17.00 ± 4.24 | 2.10 ± 0.14 | 2 |" in md
    assert md.index("| 0.10 |") < md.index("| 0.90 |")
    assert lambda_markdown(lambda_table(lambda_rows(tmp_path / "none"))) == ""


def test_runs_off_the_primary_lambda_are_not_pooled_in_table_1(tmp_path: Path) -> None:
    """The Table 1 layout keeps lambda 0.9 as "EdgeDRM" and shows other lambdas as their own methods
    (``report`` writes ``lambda_table.md`` when the runs span several lambdas)."""
    _run(tmp_path, 0.1, 2025, 0.40, 0.30, 2.0)
    _run(tmp_path, 0.9, 2025, 0.60, 0.25, 2.0)
    methods = set(edgedrm_table(edgedrm_rows(tmp_path))["method"])
    assert {"EdgeDRM", "EdgeDRM (lambda 0.1)"} <= methods
    rows = lambda_rows(tmp_path)
    assert rows["lam"].n_unique() == 2 and "| 0.10 | 40.00 |" in lambda_markdown(lambda_table(rows))


def test_each_lambda_against_0_9_paired_by_seed(tmp_path: Path) -> None:
    """Three seeds. lambda 0.9: EdgeDRM 60 / 62 / 64, NR 30 / 30 / 30. lambda 0.1: EdgeDRM 55 / 58 / 58
    (minus 0.9: -5, -4, -6 -> -5.00, SD 1, half-width t_{0.975,2} / sqrt(3) = 2.484: worse), NR 35 /
    36 / 34 (+5, +6, +4 -> +5.00: better); gain of 0.1: 20, 22, 24 -> +22.00, SD 2 (better). Seed
    2026 pairs with seed 2026, so sorting values instead would change the SDs."""
    from lightning_fed.reporting.lambda_table import lambda_paired, lambda_paired_markdown

    for seed, e9, e1, n1 in ((2025, 0.60, 0.55, 0.35), (2026, 0.62, 0.58, 0.36), (2027, 0.64, 0.58, 0.34)):
        _run(tmp_path, 0.9, seed, e9, 0.30, 2.0)
        _run(tmp_path, 0.1, seed, e1, n1, 2.0)
    paired = lambda_paired(lambda_rows(tmp_path))
    low = paired.filter(pl.col("lam") == 0.1).row(0, named=True)
    half = 4.302652729749464 / 3**0.5
    assert low["edgedrm_diff"] == pytest.approx(-5.0) and low["edgedrm_verdict"] == "worse"
    assert low["edgedrm_high"] == pytest.approx(-5.0 + half)
    assert low["nr_diff"] == pytest.approx(5.0) and low["nr_verdict"] == "better"
    assert low["gain_diff"] == pytest.approx(22.0) and low["gain_high"] == pytest.approx(22.0 + 2 * half)
    same = paired.filter(pl.col("lam") == 0.9).row(0, named=True)
    assert same["edgedrm_diff"] == pytest.approx(0.0) and same["edgedrm_verdict"] == "within noise"
    md = lambda_paired_markdown(paired)
    assert (
        f"| 0.10 | -5.00 [-7.48, -2.52] (worse) | +5.00 [+{5 - half:.2f}, +{5 + half:.2f}] (better) |" in md
    )
    assert lambda_paired(lambda_rows(tmp_path).filter(pl.col("lam") == 0.1)).height == 0


def test_reached_column_and_the_plot(tmp_path: Path) -> None:
    """With ``source_reached`` recorded: lambda 0.1 reaches the source in 4 % and 6 % of walks (mean 5,
    SD sqrt(2) = 1.41), lambda 0.9 in 10 % twice (SD 0); the column sits after Calls. Without the column
    (the fixtures above) the table keeps Table 5's five columns."""
    from lightning_fed.reporting.lambda_table import lambda_plot

    _run(tmp_path, 0.1, 2025, 0.50, 0.30, 1.2, reached=4.0)
    _run(tmp_path, 0.1, 2026, 0.54, 0.40, 1.0, reached=6.0)
    _run(tmp_path, 0.9, 2025, 0.50, 0.25, 1.5, reached=10.0)
    _run(tmp_path, 0.9, 2026, 0.50, 0.25, 1.5, reached=10.0)
    table = lambda_table(lambda_rows(tmp_path))
    md = lambda_markdown(table)
    assert "| lambda | EdgeDRM | EdgeDRM-NR | Referral gain | Calls | Reached (%) | Seeds |" in md
    assert "| 0.10 | 52.00 ± 2.83 | 35.00 ± 7.07 | 17.00 ± 4.24 | 1.10 ± 0.14 | 5.00 ± 1.41 | 2 |" in md
    assert "| 0.90 | 50.00 ± 0.00 | 25.00 ± 0.00 | 25.00 ± 0.00 | 1.50 ± 0.00 | 10.00 ± 0.00 | 2 |" in md
    path = tmp_path / "out" / "lambda_table.png"
    lambda_plot(table, path)
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 1000
    with pytest.raises(ValueError, match="lambda table has no rows"):
        lambda_plot(pl.DataFrame())

    old = tmp_path / "old"
    _run(old, 0.1, 2025, 0.50, 0.30, 1.2)
    _run(old, 0.9, 2025, 0.60, 0.25, 1.2)
    assert "Reached" not in lambda_markdown(lambda_table(lambda_rows(old)))
