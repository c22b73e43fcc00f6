"""Hospital-tier runs in the reports: the graph is keyed by its shortcut flag (never pooled), Table 4."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting.edgedrm_tables import edgedrm_markdown, edgedrm_rows, edgedrm_table, run_setting
from lightning_fed.reporting.referral import tier_markdown, tier_rows, tier_table

CONFIG = """seed: {seed}
data:
  class_path: lightning_fed.data.FashionMNIST
  init_args:
    num_clients: 32
    partition: {{class_path: lightning_fed.data.BalancedSizes}}
algorithm:
  class_path: lightning_fed.algorithms.EdgeDRM
  init_args:
    topology:
      class_path: lightning_fed.graphs.HospitalTiers
      init_args: {{shortcut: {shortcut}}}
"""


def _row(router: str, rule: str, acc: float, large: float, peak: float, calls: float) -> dict:
    return {
        "router": router,
        "prediction_rule": rule,
        "accuracy": acc,
        "calls_per_query": calls,
        "share_large": large,
        "calls_per_100_large": large * calls,  # calls per query x share of them on the large tier
        "peak_share": peak,
        "queries": "panel 200x64",
    }


def _run(root: Path, seed: int, shortcut: bool, acc: float) -> None:
    run = root / f"edgedrm_tiers_{'shortcut' if shortcut else 'layered'}-seed{seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({}))
    (run / "config.yaml").write_text(CONFIG.format(seed=seed, shortcut=str(shortcut).lower()))
    rows = [
        _row("EdgeDRM", "weighted history", acc, 50.0 + 20.0 * shortcut, 7.0 + seed % 2, 2.5),
        _row("EdgeDRM", "hard terminal", 0.0, 0.0, 0.0, 0.0),  # not Table 4's rule
        _row("EdgeDRM w/o prior", "weighted history", acc - 0.02, 20.0, 5.0, 2.0),
        _row("EdgeDRM-NR", "weighted history", acc - 0.05, 25.0, 3.125, 1.0),
        _row("random", "weighted history", 0.1, 30.0, 4.0, 3.0),  # not a Table 4 condition
    ]
    pl.DataFrame(rows).write_csv(run / "referral.csv")


def test_layered_and_shortcut_runs_are_two_graphs(tmp_path: Path) -> None:
    """Two runs that differ only in ``shortcut`` give two rows, not one pooled mean over both graphs."""
    _run(tmp_path, 2025, False, 0.66)
    _run(tmp_path, 2025, True, 0.68)
    table = edgedrm_table(edgedrm_rows(tmp_path))
    edrm = table.filter(pl.col("method") == "EdgeDRM")
    assert edrm.height == 2 and sorted(edrm["graph"]) == ["Tiers-layered", "Tiers-shortcut"]
    assert edrm["seeds"].to_list() == [1, 1] and sorted(edrm["mean"]) == pytest.approx([66.0, 68.0])
    md = edgedrm_markdown(table)
    assert "| Tiers-layered | EdgeDRM | **66.00** |" in md
    assert "| Tiers-shortcut | EdgeDRM | **68.00** |" in md


def test_tier_graph_key_carries_non_default_sizes() -> None:
    def graph(args: dict) -> str:
        topo = {"class_path": "lightning_fed.graphs.HospitalTiers", "init_args": args}
        return run_setting({"algorithm": {"init_args": {"topology": topo}}})["graph"]

    assert graph({}) == "Tiers-layered" and graph({"shortcut": True}) == "Tiers-shortcut"
    assert graph({"shortcut": False, "small": 4, "medium": 2, "large": 2}) == "Tiers-layered 4/2/2"


def test_tier_table_is_table_4_over_seeds(tmp_path: Path) -> None:
    """Three seeds per graph: accuracy (%) mean +/- sample SD, NR workload fixed by uniform entry."""
    for seed, acc in ((2025, 0.60), (2026, 0.70), (2027, 0.65)):
        for shortcut in (False, True):
            _run(tmp_path, seed, shortcut, acc)
    rows = tier_rows(tmp_path)
    assert rows.height == 3 * 2 * 3 and set(rows["condition"]) == {
        "EdgeDRM-NR",
        "History, no prior",
        "History + prior",
    }
    table = tier_table(rows)
    assert table["graph"].to_list() == ["Tiers-layered"] * 3 + ["Tiers-shortcut"] * 3
    assert table["condition"].to_list()[:3] == ["EdgeDRM-NR", "History, no prior", "History + prior"]
    prior = table.row(5, named=True)
    assert prior["accuracy_mean"] == pytest.approx(65.0) and prior["accuracy_sd"] == pytest.approx(5.0)
    assert prior["share_large_mean"] == pytest.approx(70.0) and prior["seeds"] == 3
    md = tier_markdown(table)
    assert md.splitlines()[0].startswith("| Condition | Accuracy (%) | Calls/query | Large share (%) |")
    nr = "| Tiers-layered: EdgeDRM-NR | 60.00 ± 5.00 | 1.00 ± 0.00 | 25.00 ± 0.00 | 25.00 ± 0.00 | "
    assert nr + "3.125 ± 0.000 | 3 | panel 200x64 |" in md
    assert tier_markdown(tier_table(tier_rows(tmp_path / "empty"))) == ""


def test_tier_contrasts_pair_conditions_and_graphs_by_seed(tmp_path: Path) -> None:
    """Seeds 2025-2027 at accuracies 0.60 / 0.70 / 0.65 (``_run``):

    - prior minus no prior, accuracy: 0.02 each seed -> +2.00, SD 0 so the interval is [2, 2]
      (better); large share 50 - 20 = +30 (layered);
    - prior minus EdgeDRM-NR, accuracy: +5.00 each seed;
    - shortcut minus layered (History + prior), large share: 70 - 50 = +20 every seed; peak share is
      7 + seed % 2 on both graphs -> 0 every seed: an interval [0, 0], which contains 0 (within noise).
    """
    from lightning_fed.reporting.tier_contrasts import tier_contrasts, tier_contrasts_markdown

    for seed, acc in ((2025, 0.60), (2026, 0.70), (2027, 0.65)):
        for shortcut in (False, True):
            _run(tmp_path, seed, shortcut, acc)
    out = {
        (r["contrast"], r["quantity"]): r for r in tier_contrasts(tier_rows(tmp_path)).iter_rows(named=True)
    }
    prior = out[("Tiers-layered: prior minus no prior", "accuracy")]
    assert (prior["seeds"], prior["diff"], prior["verdict"]) == (3, pytest.approx(2.0), "better")
    assert prior["ci_low"] == pytest.approx(2.0) and prior["ci_high"] == pytest.approx(2.0)
    assert out[("Tiers-layered: prior minus no prior", "share_large")]["diff"] == pytest.approx(30.0)
    assert out[("Tiers-shortcut: prior minus EdgeDRM-NR", "accuracy")]["diff"] == pytest.approx(5.0)
    cross = out[("History + prior: shortcut minus layered", "share_large")]
    assert cross["diff"] == pytest.approx(20.0) and cross["verdict"] == "better"
    peak = out[("History + prior: shortcut minus layered", "peak_share")]
    assert peak["diff"] == pytest.approx(0.0) and peak["verdict"] == "within noise"
    md = tier_contrasts_markdown(tier_contrasts(tier_rows(tmp_path)))
    assert (
        "| History + prior: shortcut minus layered | large share (pp) | 3 | +20.00 [+20.00, +20.00] |" in md
    )
    assert tier_contrasts_markdown(tier_contrasts(tier_rows(tmp_path / "empty"))) == ""
