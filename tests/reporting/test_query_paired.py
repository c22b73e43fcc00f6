"""Routers paired query by query (``referral_queries_paired.md``) over hand-made run folders."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.referral.refer import HEADLINE as REFER_HEADLINE
from lightning_fed.reporting.runs import read_runs
from lightning_fed.reporting.tables import query_paired
from lightning_fed.reporting.tables.query_paired import HEADLINE, query_paired_markdown, query_paired_rows

# Per seed, correctness on 4 queries. EdgeDRM (weighted history) vs EdgeDRM-NR (one rule, "any" in
# the markdown: its three rules are written, the weighted-history one is read).
# Seed 0: EdgeDRM 1,1,1,0; NR 1,0,0,0 -> d = 0,1,1,0 (x100): mean 50.
# Seed 1: EdgeDRM 1,1,0,0; NR 0,0,0,0 -> d = 1,1,0,0: mean 50.
# Hand-computed: 50 accuracy points; every resampled mean lies in [0, 100].
OURS = {0: [True, True, True, False], 1: [True, True, False, False]}
NR = {0: [True, False, False, False], 1: [False, False, False, False]}
# The stage-I row has only the hard-terminal rule: d = ours - stage1 with stage1 all right.
STAGE1 = {0: [True] * 4, 1: [True] * 4}


def _frame(key: str, rules: list[str], correct: list[bool]) -> pl.DataFrame:
    n = len(correct)
    return pl.concat(
        pl.DataFrame(
            {
                "query": list(range(n)),
                "router": [key] * n,
                "router_key": [key] * n,
                "prediction_rule": [rule] * n,
                "correct": correct,
            }
        )
        for rule in rules
    )


def _run(root: Path, seed: int) -> None:
    run = root / f"edgedrm-seed{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    setting = {"data": "FashionMNIST", "partition": "SPC5", "graph": "Path"}
    (run / "summary.json").write_text(json.dumps({"label": "edgedrm", "seed": seed, "setting": setting}))
    rules = ["hard terminal", "uniform history", "weighted history"]
    wrong_rule = [not c for c in OURS[seed]]  # EdgeDRM's other rules differ: the headline rule is read
    pl.concat(
        [
            _frame("EdgeDRM", rules[:2], wrong_rule),
            _frame("EdgeDRM", rules[2:], OURS[seed]),
            _frame("EdgeDRM-NR", rules, NR[seed]),
            _frame("DFedAvgM (stage I)", rules[:1], STAGE1[seed]),
            _frame(f"LocalOnly (local-seed{seed})", rules[:1], NR[seed]),
        ]
    ).write_parquet(run / "referral_queries.parquet")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for seed in (0, 1):
        _run(tmp_path, seed)
    return tmp_path


def test_hand_computed_query_paired_difference(root: Path) -> None:
    rows = query_paired_rows(read_runs(root))
    nr = rows.filter(pl.col("router") == "EdgeDRM-NR").sort("seed")
    assert nr["rule"].to_list() == ["weighted history"] * 2 and nr["queries"].to_list() == [4, 4]
    assert nr["diffs"].to_list() == [[0.0, 100.0, 100.0, 0.0], [100.0, 100.0, 0.0, 0.0]]
    stage1 = rows.filter(pl.col("router") == "DFedAvgM (stage I)")
    assert set(stage1["rule"]) == {"hard terminal"}  # its only rule
    text = query_paired_markdown(rows)
    line = next(x for x in text.splitlines() if "| EdgeDRM-NR |" in x)
    cells = "| Path | FashionMNIST SPC5 | 0.9 | EdgeDRM-NR | weighted history | 2 | 8 | 62.50 | 12.50 |"
    assert cells in line
    assert "+50.00 [" in line
    low = float(line.split("+50.00 [")[1].split(",")[0])
    assert 0.0 <= low <= 50.0
    stage_line = next(x for x in text.splitlines() if "| DFedAvgM (stage I) |" in x)
    assert "-37.50" in stage_line  # (62.5 - 100)


def test_query_paired_table_is_a_report_spec(root: Path) -> None:
    assert HEADLINE == REFER_HEADLINE  # the report reads the row refer marks
    assert query_paired.SPEC.gate == "edgedrm"
    assert query_paired.SPEC.text(read_runs(root)).startswith("| graph |")


def test_baseline_rows_of_each_seed_pool_under_their_method(root: Path) -> None:
    """``refer --baselines`` keys name their run folder (``LocalOnly (local-seed0)``, ``... seed1``):
    the table pairs them under one row ``Local`` over both seeds, as the other routers. By hand,
    hard terminal against EdgeDRM's weighted history: seed 0 d = 0,1,1,0 and seed 1 d = 1,1,0,0
    (x100) -> +50.00 over 8 queries, Local's accuracy (25 + 0) / 2 = 12.50."""
    text = query_paired_markdown(query_paired_rows(read_runs(root)))
    lines = [x for x in text.splitlines() if "Local" in x]
    assert len(lines) == 1
    cells = "| Path | FashionMNIST SPC5 | 0.9 | Local | hard terminal | 2 | 8 | 62.50 | 12.50 | +50.00 ["
    assert cells in lines[0]
