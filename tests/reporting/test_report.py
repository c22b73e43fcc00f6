"""Reporting over fake run directories: aggregation, markdown, Pareto front, PNGs, empty-root error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting import (
    collect_runs,
    method_label,
    pareto_front,
    pareto_plot,
    read_runs,
    report,
    table1,
    write_table,
)
from lightning_fed.reporting.families import is_upper_bound, run_family

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# method -> per seed: (test_auroc_mean, bytes_vs_fedavg, isolation_rate or None, mean_partners or None, wall)
RUNS = {
    "fedavg": [(0.80, 1.0, None, None, 10.0), (0.82, 1.0, None, None, 14.0)],
    "abps_x": [(0.84, 0.12, 0.02, 0.98, 6.0), (0.86, 0.14, 0.04, 0.96, 8.0)],
    "local": [(0.77, 0.0, None, None, 20.0), (0.78, 0.0, None, None, 22.0)],
}


def _write_run(root: Path, name: str, seed: int, values: tuple, rounds: int = 3, centers: int = 2) -> Path:
    auroc, bw, iso, partners, wall = values
    run = root / name
    run.mkdir(parents=True)
    summary = {
        "method": "ABPS" if "abps" in name else name.split("-")[0].capitalize(),
        "seed": seed,
        "test_auroc_mean": auroc,
        "test_auroc_std": 0.1,
        "total_bytes": int(bw * 1000),
        "bytes_vs_fedavg": bw,
        "rounds": rounds,
        "wall_seconds": wall,
    }
    if iso is not None:
        summary |= {"isolation_rate": iso, "mean_partners": partners}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    rows = {
        "round": [r for r in range(rounds) for _ in range(centers)],
        "center": [c for _ in range(rounds) for c in range(centers)],
        "test_auroc": [auroc] * rounds * centers,
        "bytes": [100] * rounds * centers,
    }
    if iso is not None:
        rows["isolation_rate"] = [iso * (r + 1) / rounds for r in range(rounds) for _ in range(centers)]
    pl.DataFrame(rows).write_parquet(run / "rounds.parquet")
    return run


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for method, seeds in RUNS.items():
        for seed, values in enumerate(seeds):
            name = (
                f"{method}-seed{seed}-20261129-1412{seed:02d}"
                if method == "fedavg"
                else f"{method}-seed{seed}"
            )
            _write_run(root, name, seed, values)
    _write_run(root / "nested", "local-seed9", 9, (0.775, 0.0, None, None, 21.0))  # found recursively
    return root


def test_method_label_strips_seed_suffix() -> None:
    assert method_label(Path("abps_x-seed3"), {}) == "abps_x"
    assert method_label(Path("abps-seed0-20261129-141200"), {}) == "abps"
    assert method_label(Path("fedavg_pq_seed12"), {}) == "fedavg_pq"
    assert method_label(Path("abps_goal_diversity"), {}) == "abps_goal_diversity"
    assert method_label(Path("r/abps_q/seed1"), {}, root=Path("r")) == "abps_q"
    assert method_label(Path("r/seed1"), {"method": "FedAvg"}, root=Path("r")) == "fedavg"


def test_collect_runs(runs_root: Path) -> None:
    runs = collect_runs(runs_root)
    assert runs.height == 7
    assert set(runs["method"]) == {"fedavg", "abps_x", "local"}
    fed = runs.filter(pl.col("method") == "fedavg")
    assert fed["isolation_rate"].null_count() == 2 and fed["seed"].to_list() == [0, 1]
    assert runs.filter(pl.col("run") == "local-seed9")["seed"].item() == 9


def test_table1_aggregates(runs_root: Path) -> None:
    runs = collect_runs(runs_root).filter(pl.col("run") != "local-seed9")
    t = table1(runs)
    assert t["method"].to_list() == ["abps_x", "fedavg", "local"]  # by mean AUROC, descending
    row = {r["method"]: r for r in t.iter_rows(named=True)}
    assert row["abps_x"]["auroc_mean"] == pytest.approx(0.85)
    assert row["abps_x"]["auroc_std"] == pytest.approx(math.sqrt(2) * 0.01)  # ddof=1: |a-b|/sqrt(2)
    assert row["fedavg"]["auroc_std"] == pytest.approx(math.sqrt(2) * 0.01)
    assert row["local"]["auroc_std"] == pytest.approx(math.sqrt(2) * 0.005)
    assert row["abps_x"]["n_seeds"] == 2
    assert row["abps_x"]["bytes_vs_fedavg"] == pytest.approx(0.13)
    assert row["abps_x"]["isolation_rate"] == pytest.approx(0.03)
    assert row["abps_x"]["mean_partners"] == pytest.approx(0.97)
    assert row["fedavg"]["isolation_rate"] is None and row["fedavg"]["mean_partners"] is None
    assert row["fedavg"]["wall_seconds"] == pytest.approx(12.0)
    one = table1(runs.filter(pl.col("seed") == 0))
    assert one["auroc_std"].null_count() == 3 and set(one["n_seeds"]) == {1}


def test_write_table_markdown_and_csv(runs_root: Path, tmp_path: Path) -> None:
    t = table1(collect_runs(runs_root).filter(pl.col("run") != "local-seed9"))
    md, csv = write_table(t, tmp_path / "out" / "table1")
    assert md.name == "table1.md" and csv.name == "table1.csv"
    text = md.read_text()
    assert text.startswith("| method | test AUROC |")
    assert "| abps_x | 0.850 ± 0.014 | 2 | 0.13x | 3.0 % | 0.97 | 3 | 7 |" in text
    assert "| fedavg | 0.810 ± 0.014 | 2 | 1.00x | - | - | 3 | 12 |" in text
    assert "| local | 0.775 ± 0.007 | 2 | 0.00x | - | - |" in text
    back = pl.read_csv(csv)
    assert back["method"].to_list() == t["method"].to_list()
    assert back["auroc_mean"].to_list() == pytest.approx(t["auroc_mean"].to_list())
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic: no temporary left behind


def test_pareto_front_hand_built() -> None:
    # (bytes, auroc): A local 0 bytes, B dominated by C, C cheap and good, D best and costly,
    # E dominated by D (same bytes, lower AUROC), F identical to C (ties stay on the front).
    x = [0.0, 0.5, 0.2, 1.0, 1.0, 0.2]
    y = [0.77, 0.80, 0.84, 0.86, 0.85, 0.84]
    assert pareto_front(x, y) == [True, False, True, True, False, True]


def _family_run(root: Path, name: str, method: str) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"method": method, "seed": 1, "label": name}))
    (run / "config.yaml").write_text("seed: 1\n")


def test_method_families_are_declared_by_algorithm_key(tmp_path: Path) -> None:
    # The family comes from the algorithm key (summary["method"]) or an exact declared label, never
    # from a substring of the label: a label naming another method does not change it.
    _family_run(tmp_path, "abps_looking_like_fedavg", "ABPS")
    _family_run(tmp_path, "abps_goal_diversity", "ABPS")
    _family_run(tmp_path, "abps_goal_diversity_mine", "ABPS")
    _family_run(tmp_path, "central_fedavg", "FedAvg")
    _family_run(tmp_path, "pooled", "Centralized")
    _family_run(tmp_path, "edge", "EdgeDRM")
    _family_run(tmp_path, "local_mine", "MyNewMethod")
    records = {r.label: r for r in read_runs(tmp_path)}
    assert {label: run_family(r) for label, r in records.items()} == {
        "abps_looking_like_fedavg": "ABPS",
        "abps_goal_diversity": "goal-aware ABPS",
        "abps_goal_diversity_mine": "ABPS",
        "central_fedavg": "FedAvg-like (star)",
        "pooled": "no exchange",
        "edge": "decentralized (graph)",
        "local_mine": "other",
    }
    assert [label for label, r in records.items() if is_upper_bound(r)] == ["pooled"]


def test_pareto_plot_png(runs_root: Path, tmp_path: Path) -> None:
    t = table1(collect_runs(runs_root))
    path = pareto_plot(t, tmp_path / "p.png", centralized_auroc=0.9)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_report_writes_everything(runs_root: Path) -> None:
    written = report(runs_root)
    assert set(written) == {"table1.md", "table1.csv", "runs.csv", "pareto.png", "isolation.png"}
    for p in written.values():
        assert p.parent == runs_root / "report" and p.stat().st_size > 0
    for name in ("pareto.png", "isolation.png"):
        assert written[name].read_bytes().startswith(PNG_MAGIC)
    assert "abps_x" in written["table1.md"].read_text()
    again = report(runs_root)  # the report folder holds no summary.json: nothing new is collected
    assert again["table1.csv"].read_text() == written["table1.csv"].read_text()


def test_report_skips_isolation_without_data(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed, values in enumerate(RUNS["fedavg"]):
        _write_run(root, f"fedavg-seed{seed}", seed, values)
    written = report(root, tmp_path / "out")
    assert set(written) == {"table1.md", "table1.csv", "runs.csv", "pareto.png"}
    assert not (tmp_path / "out" / "isolation.png").exists()


def test_empty_root_raises(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match="no run directories"):
        collect_runs(tmp_path / "empty")
    with pytest.raises(ValueError, match="not a directory"):
        report(tmp_path / "missing")
