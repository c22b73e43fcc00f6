"""Paired seed-by-seed differences behind the EdgeDRM orderings (``edgedrm_paired.md``)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting.edgedrm_paired import edgedrm_paired, edgedrm_paired_markdown
from lightning_fed.reporting.paired import BETTER, NOT_APPLICABLE, WITHIN_NOISE, WORSE

#: t_{0.975, 2} (scipy.stats.t.ppf(0.975, 2)).
T2 = 4.302652729749464


def _rows(cells: dict[tuple[str, str], list[float]]) -> pl.DataFrame:
    """``{(graph, method): [acc seed 1, seed 2, seed 3]}`` -> edgedrm_rows' frame (one setting)."""
    rows = [
        {
            "run": f"{g}-{m}-{s}",
            "dataset": "FashionMNIST",
            "partition": "5-SPC",
            "clients": 8,
            "graph": g,
            "seed": s,
            "method": m,
            "accuracy": a,
        }
        for (g, m), accs in cells.items()
        for s, a in enumerate(accs, start=1)
    ]
    return pl.DataFrame(rows)


def test_hand_computed_intervals_and_verdicts() -> None:
    """Three seeds on RR4. EdgeDRM (50, 52, 54):

    - minus DFedAvgM (49, 50, 51): d = (1, 2, 3), d_bar = 2, s_d = 1, half = 4.3027 / sqrt(3) =
      2.4841, CI [-0.484, 4.484]: contains 0 -> within noise (the means differ by 2 points);
    - minus EdgeDRM-NR (30, 33, 35): d = (20, 19, 19), d_bar = 19.333, s_d = 0.57735,
      half = 4.3027 * 0.57735 / sqrt(3) = 1.4342 -> better;
    - DisPFL (40, 41, 60) has mean 47, below DFedAvgM's 50, so the strongest other decentralized
      method is DFedAvgM, whose row is marked (no repeated row);
    - minus FedDRM (60, 61, 63) (reference group, no graph): d = (-10, -9, -9) -> worse.
    Local is a reference and never a comparator.
    """
    rows = _rows(
        {
            ("RR4", "EdgeDRM"): [50, 52, 54],
            ("RR4", "DFedAvgM"): [49, 50, 51],
            ("RR4", "EdgeDRM-NR"): [30, 33, 35],
            ("RR4", "DisPFL"): [40, 41, 60],
            ("RR4", "Local"): [90, 90, 90],
            ("Reference", "FedDRM"): [60, 61, 63],
        }
    )
    out = {r["comparator"]: r for r in edgedrm_paired(rows).iter_rows(named=True)}
    assert set(out) == {"DFedAvgM", "EdgeDRM-NR", "FedDRM"}  # the best other is DFedAvgM: marked
    d = out["DFedAvgM"]
    half = T2 / math.sqrt(3)
    assert (d["seeds"], d["diff"]) == (3, pytest.approx(2.0))
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert d["verdict"] == WITHIN_NOISE
    nr = out["EdgeDRM-NR"]
    assert nr["diff"] == pytest.approx(58 / 3)
    assert nr["ci_high"] - nr["diff"] == pytest.approx(T2 * math.sqrt(1 / 3) / math.sqrt(3))
    assert nr["verdict"] == BETTER
    assert [r for r, v in out.items() if v["best_other"]] == ["DFedAvgM"]
    assert "| RR4 | FashionMNIST 5-SPC | DFedAvgM (best other) | 3 |" in edgedrm_paired_markdown(
        edgedrm_paired(rows)
    )
    assert out["FedDRM"]["diff"] == pytest.approx(-28 / 3)
    assert out["FedDRM"]["verdict"] == WORSE


def test_best_other_is_chosen_by_mean_and_pairs_by_seed() -> None:
    """DisPFL (60, 40, 62; mean 54) beats DFedAvgM (50, 50, 50): EdgeDRM (55, 45, 66) minus DisPFL
    is d = (-5, 5, 4), d_bar = 4/3, pairing seed s with seed s (not sorted values)."""
    rows = _rows(
        {
            ("Path", "EdgeDRM"): [55, 45, 66],
            ("Path", "DFedAvgM"): [50, 50, 50],
            ("Path", "DisPFL"): [60, 40, 62],
        }
    )
    best = edgedrm_paired(rows).filter(pl.col("comparator") == "best other").row(0, named=True)
    assert best["method"] == "DisPFL"
    assert best["diff"] == pytest.approx(4 / 3)
    sd = math.sqrt(sum((x - 4 / 3) ** 2 for x in (-5, 5, 4)) / 2)
    assert best["ci_high"] == pytest.approx(4 / 3 + T2 * sd / math.sqrt(3))
    assert "| Path | FashionMNIST 5-SPC | DisPFL (best other) | 3 |" in edgedrm_paired_markdown(
        edgedrm_paired(rows)
    )


def test_one_seed_has_no_interval() -> None:
    rows = _rows({("Cycle", "EdgeDRM"): [50], ("Cycle", "DFedAvgM"): [45]})
    row = edgedrm_paired(rows).filter(pl.col("comparator") == "DFedAvgM").row(0, named=True)
    assert (row["seeds"], row["diff"], row["ci_low"], row["verdict"]) == (1, 5.0, None, NOT_APPLICABLE)
    assert "| +5.00 | n/a |" in edgedrm_paired_markdown(edgedrm_paired(rows))


def test_no_edgedrm_gives_an_empty_table() -> None:
    rows = _rows({("Path", "DFedAvgM"): [1, 2]})
    assert edgedrm_paired(rows).height == 0
    assert edgedrm_paired_markdown(edgedrm_paired(rows)) == ""


def test_reach_table_means_over_seeds(tmp_path: Path) -> None:
    """Two RR4 seeds: EdgeDRM reaches the source in 60 % / 70 % of walks (65.0 ± 7.1), random in
    40 % / 40 %; 90 % / 100 % of sources are in reach (95.0 ± 7.1). A referral table without the
    source columns (older runs, panel queries) contributes nothing."""
    import json

    from lightning_fed.reporting.referral_reach import reach_markdown, reach_rows, reach_table

    config = (
        "seed: {seed}\ndata:\n  class_path: lightning_fed.data.FashionMNIST\n  init_args:\n"
        "    partition: {{class_path: lightning_fed.data.Shards, init_args: {{per_client: 5}}}}\n"
        "algorithm:\n  class_path: lightning_fed.algorithms.EdgeDRM\n  init_args:\n"
        "    topology: {{class_path: lightning_fed.graphs.RandomRegular}}\n"
    )
    for seed, ours, ceiling in ((1, 60.0, 90.0), (2, 70.0, 100.0)):
        run = tmp_path / f"rr4-seed{seed}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({}))
        (run / "config.yaml").write_text(config.format(seed=seed))
        rows = [
            {"router": r, "prediction_rule": rule, "source_reached": v, "source_in_reach": ceiling}
            for r, v in (("EdgeDRM", ours), ("random", 40.0), ("EdgeDRM-NR", 0.0))
            for rule in ("hard terminal", "weighted history")
        ]
        pl.DataFrame(rows).write_csv(run / "referral.csv")
    old = tmp_path / "old-seed3"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    (old / "config.yaml").write_text(config.format(seed=3))
    pl.DataFrame([{"router": "EdgeDRM", "prediction_rule": "hard terminal", "accuracy": 0.5}]).write_csv(
        old / "referral.csv"
    )
    found = reach_rows(tmp_path)
    assert found.height == 4 and set(found["router"]) == {"EdgeDRM", "random"}
    md = reach_markdown(reach_table(found))
    assert "| RR4 | FashionMNIST 5-SPC | 2 | 95.0 ± 7.1 | 65.0 ± 7.1 | 40.0 ± 0.0 |" in md


def test_reach_table_keeps_lambdas_apart(tmp_path: Path) -> None:
    """Two runs of one graph, setting and seed at lambda 0.9 (reached 20 %) and 0.5 (reached 60 %) are
    two rows with a lambda column, never one pooled 40.0 ± 28.3 cell."""
    import json

    from lightning_fed.reporting.referral_reach import reach_markdown, reach_rows, reach_table

    config = (
        "seed: 1\ndata:\n  class_path: lightning_fed.data.FashionMNIST\n"
        "algorithm:\n  class_path: lightning_fed.algorithms.EdgeDRM\n  init_args:\n"
        "    lam: {lam}\n    topology: {{class_path: lightning_fed.graphs.Path}}\n"
    )
    for lam, reached in ((0.9, 20.0), (0.5, 60.0)):
        run = tmp_path / f"path-lam{lam}-seed1"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({}))
        (run / "config.yaml").write_text(config.format(lam=lam))
        row = {"router": "EdgeDRM", "prediction_rule": "hard terminal"}
        pl.DataFrame([{**row, "source_reached": reached, "source_in_reach": 100.0}]).write_csv(
            run / "referral.csv"
        )
    md = reach_markdown(reach_table(reach_rows(tmp_path))).splitlines()
    assert md[0] == "| graph | setting | lambda | seeds | in reach (%) | EdgeDRM reached (%) |"
    assert md[2:] == [
        "| Path | FashionMNIST default | 0.5 | 1 | 100.0 | 60.0 |",
        "| Path | FashionMNIST default | 0.9 | 1 | 100.0 | 20.0 |",
    ]
