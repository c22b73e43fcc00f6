"""Table specs over run records: hand-computed tables, and routers selected by key, not label."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from lightning_fed.render import markdown_table, mean_sd
from lightning_fed.reporting import report
from lightning_fed.reporting.runs import RunRecord, read_runs
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import mean_sd_by
from lightning_fed.reporting.tables import reach, specs
from lightning_fed.reporting.tables.edgedrm import edgedrm_rows
from tests.reporting.edgedrm_config import rr4_dir03_config


def _referral_run(root: Path, name: str, seed: int, rows: list[dict]) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"seed": seed, "method": "EdgeDRM", "label": "edgedrm"}))
    (run / "config.yaml").write_text(rr4_dir03_config(seed=seed, lam=0.9))
    pl.DataFrame(rows).write_csv(run / "referral.csv")
    return run


def _walk(router: str, key: str, reached: float, in_reach: float) -> dict:
    return {
        "router": router,
        "prediction_rule": "weighted history",
        "accuracy": reached / 100,
        "source_reached": reached,
        "source_in_reach": in_reach,
        "router_key": key,
    }


def test_reach_spec_against_a_hand_computed_table(tmp_path: Path) -> None:
    """Two seeds: EdgeDRM reaches 40 and 50 % (mean 45.0, sample SD sqrt(50) = 7.07), the random walk
    20 and 30 %, the ceiling 80 and 90 %. The EdgeDRM router is relabelled ("my router"); its key
    puts it in the EdgeDRM column, and a router the table does not show ("mystery") is left out."""
    for seed, (ours, rand, ceiling) in ((1, (40.0, 20.0, 80.0)), (2, (50.0, 30.0, 90.0))):
        rows = [
            _walk("my router", "EdgeDRM", ours, ceiling),
            _walk("random", "random", rand, ceiling),
            _walk("mystery", "mystery", 99.0, ceiling),
        ]
        _referral_run(tmp_path, f"edgedrm-seed{seed}", seed, rows)
    expected = (
        "| graph | setting | seeds | in reach (%) | EdgeDRM reached (%) | random reached (%) |\n"
        "|---|---|---|---|---|---|\n"
        "| RR4 | FashionMNIST Dir-0.3 | 2 | 85.0 ± 7.1 | 45.0 ± 7.1 | 25.0 ± 7.1 |\n"
    )
    records = read_runs(tmp_path)
    assert reach.SPEC.text(records) == expected
    assert reach.SPEC.write(records, tmp_path / "out") == {
        "referral_reach.md": tmp_path / "out" / "referral_reach.md"
    }
    assert (tmp_path / "out" / "referral_reach.md").read_text() == expected
    assert reach.SPEC.write([], tmp_path / "none") == {} and not (tmp_path / "none").exists()


def test_relabelled_routers_stay_in_the_edgedrm_tables(tmp_path: Path) -> None:
    """``refer --routers`` with new labels writes the same ``router_key``: the rows keep their table
    method; a table written before keys existed (no ``router_key`` column) is read by its labels."""
    relabelled = [
        {"router": "ours, relabelled", "router_key": "EdgeDRM", "rule": "weighted history", "acc": 0.7},
        {"router": "no referral (mine)", "router_key": "EdgeDRM-NR", "rule": "hard terminal", "acc": 0.6},
        {"router": "stage one", "router_key": "DFedAvgM (stage I)", "rule": "hard terminal", "acc": 0.5},
    ]
    rows = [{"router": r["router"], "prediction_rule": r["rule"], "accuracy": r["acc"]} for r in relabelled]
    _referral_run(
        tmp_path,
        "new-seed1",
        1,
        [row | {"router_key": r["router_key"]} for row, r in zip(rows, relabelled, strict=True)],
    )
    old = [{"router": "EdgeDRM", "prediction_rule": "weighted history", "accuracy": 0.9}]
    _referral_run(tmp_path / "older", "old-seed2", 2, old)

    found = edgedrm_rows(read_runs(tmp_path)).select("run", "method", "accuracy").sort("run", "method")
    assert found.rows() == [
        ("new-seed1", "DFedAvgM", 50.0),
        ("new-seed1", "EdgeDRM", 70.0),
        ("new-seed1", "EdgeDRM-NR", 60.0),
        ("old-seed2", "EdgeDRM", 90.0),
    ]
    written = report(tmp_path, tmp_path / "report")
    table = written["edgedrm_table.md"].read_text()
    assert "| RR4 | EdgeDRM | **80.00 ± 14.14** |" in table  # both runs, seeds 1 and 2
    assert "| RR4 | EdgeDRM-NR | 60.00 |" in table and "relabelled" not in table


def _score_rows(records: Sequence[RunRecord]) -> pl.DataFrame:
    rows = [{"label": r.label, "seed": r.seed, "score": r.summary["score"]} for r in records]
    return pl.DataFrame(rows)


def _score_markdown(rows: pl.DataFrame) -> str:
    table = mean_sd_by(rows, ["label"], ["score"])
    cells = [[r["label"], mean_sd(r, "score"), str(r["seeds"])] for r in table.iter_rows(named=True)]
    return markdown_table(["method", "score", "seeds"], cells)


def test_a_new_table_is_one_spec(tmp_path: Path) -> None:
    """A table of one's own: a filter/values function, a group-and-render function, a file name."""
    for label, seed, score in (("a", 1, 1.0), ("a", 2, 3.0), ("b", 1, 5.0)):
        run = tmp_path / f"{label}-seed{seed}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"label": label, "seed": seed, "score": score}))
    spec = TableSpec("scores.md", _score_rows, _score_markdown, "score per method, mean ± SD over seeds")
    written = spec.write(read_runs(tmp_path), tmp_path / "out")
    # a: mean 2, sample SD sqrt(2) = 1.41; b: one seed, no SD.
    expected = "| method | score | seeds |\n|---|---|---|\n| a | 2.00 ± 1.41 | 2 |\n| b | 5.00 | 1 |\n"
    assert written["scores.md"].read_text() == expected


def test_report_writes_the_specs_in_order() -> None:
    names = [s.file for s in specs()]
    assert names[:2] == ["table1.md", "diagnostics.md"] and names[-1] == "tier_table.md"
    assert len(set(names)) == len(names)
    assert {s.gate for s in specs()} == {None, "edgedrm", "tiers"}


def test_old_module_paths_alias_the_new_homes() -> None:
    """Notebooks and scripts import the pre-spec module names; they serve the same objects."""
    from lightning_fed.reporting import (
        edgedrm_checkpoints,
        edgedrm_paired,
        edgedrm_tables,
        lambda_table,
        referral,
        referral_reach,
        table,
        tier_contrasts,
    )
    from lightning_fed.reporting.tables import checkpoints, edgedrm, lambda_sweep, table1, tiers
    from lightning_fed.reporting.tables import edgedrm_paired as paired_home

    assert table.table1 is table1.table1 and table.collect_runs is table1.collect_runs
    assert (
        edgedrm_tables.edgedrm_rows is edgedrm.edgedrm_rows
        and edgedrm_paired.edgedrm_paired is paired_home.edgedrm_paired
    )
    assert lambda_table.lambda_rows is lambda_sweep.lambda_rows and referral.tier_rows is tiers.tier_rows
    assert (
        tier_contrasts.tier_contrasts is tiers.tier_contrasts
        and referral_reach.reach_rows is reach.reach_rows
    )
    assert edgedrm_checkpoints.checkpoint_rows is checkpoints.checkpoint_rows
