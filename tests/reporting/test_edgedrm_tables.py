"""The EdgeDRM Table 1 / 2 layout from referral run folders: methods, settings, mean +/- SD, best bold."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting.edgedrm_tables import (
    edgedrm_margins,
    edgedrm_margins_markdown,
    edgedrm_markdown,
    edgedrm_rows,
    edgedrm_settings_markdown,
    edgedrm_table,
    run_setting,
)

CONFIG = """seed: {seed}
data:
  class_path: lightning_fed.data.FashionMNIST
  init_args:
    partition:
      class_path: lightning_fed.data.Shards
      init_args: {{per_client: 5}}
algorithm:
  class_path: lightning_fed.algorithms.EdgeDRM
  init_args:
    topology: {{class_path: lightning_fed.graphs.{graph}}}
"""


def _run(root: Path, name: str, seed: int, graph: str, acc: dict[tuple[str, str], float]) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({}))
    (run / "config.yaml").write_text(CONFIG.format(seed=seed, graph=graph))
    rows = [{"router": r, "prediction_rule": rule, "accuracy": a} for (r, rule), a in acc.items()]
    pl.DataFrame(rows).write_csv(run / "referral.csv")


def test_rows_means_sd_and_best_mark(tmp_path: Path) -> None:
    """Two seeds on a path graph: EdgeDRM (0.6, 0.7) -> 65.00 +/- 7.07 (sample SD of 60 and 70),
    DFedAvgM (0.3, 0.5) -> 40.00 +/- 14.14; the oracle router 0.9 (its label before the rename,
    ``FedDRM (centralized)``, reads the same) is a reference, never bold, and is not FedDRM."""
    for seed, (e, d) in ((1, (0.6, 0.3)), (2, (0.7, 0.5))):
        _run(
            tmp_path,
            f"edgedrm-seed{seed}",
            seed,
            "Path",
            {
                ("EdgeDRM", "weighted history"): e,
                ("EdgeDRM", "hard terminal"): 0.0,  # not a reported rule
                ("DFedAvgM (stage I)", "hard terminal"): d,
                ("FedDRM (centralized)", "weighted history"): 0.9,
                ("LocalOnly (local-seed1)", "hard terminal"): 0.2,
                ("DisPFL (dispfl-seed1)", "hard terminal"): 0.45,
            },
        )
    rows = edgedrm_rows(tmp_path)
    assert set(rows["method"]) == {"EdgeDRM", "DFedAvgM", "Oracle router", "Local", "DisPFL"}
    table = edgedrm_table(rows)
    edrm = table.filter(pl.col("method") == "EdgeDRM").row(0, named=True)
    assert (
        edrm["mean"] == pytest.approx(65.0) and edrm["sd"] == pytest.approx(7.0710678) and edrm["seeds"] == 2
    )
    md = edgedrm_markdown(table)
    assert "| Path | EdgeDRM | **65.00 ± 7.07** |" in md
    assert "| Path | Oracle router | 90.00 ± 0.00 |" in md and "FedDRM" not in md
    assert md.index("| Path | Local |") < md.index("| Path | DFedAvgM |") < md.index("| Path | EdgeDRM |")
    # Table 2 layout: one row per graph and setting, methods as columns.
    settings = edgedrm_settings_markdown(table)
    assert (
        settings.splitlines()[0]
        == "| graph | setting | Local | Oracle router | DFedAvgM | DisPFL | EdgeDRM |"
    )
    assert "| Path | FashionMNIST 5-SPC | 20.00 ± 0.00 | 90.00 ± 0.00 | 40.00 ± 14.14 |" in settings
    assert settings.rstrip().endswith("| **65.00 ± 7.07** |")
    # Margins: EdgeDRM 65 vs the best other decentralized method (DisPFL 45) = +20, vs DFedAvgM +25;
    # no EdgeDRM-NR row, so no referral gain.
    margins = edgedrm_margins(table).row(0, named=True)
    assert margins["edgedrm_first"] == 1 and margins["settings"] == 1
    assert margins["margin"] == pytest.approx(20.0) and margins["vs_dfedavgm"] == pytest.approx(25.0)
    assert margins["referral_gain"] is None
    assert "| Path | 1 / 1 | +20.00 | +25.00 | - |" in edgedrm_margins_markdown(edgedrm_margins(table))


def test_setting_names() -> None:
    cfg = {
        "seed": 5,
        "data": {
            "class_path": "lightning_fed.data.CIFAR",
            "init_args": {
                "variant": 20,
                "partition": {
                    "class_path": "lightning_fed.data.DirichletLabels",
                    "init_args": {"alpha": 0.3},
                },
            },
        },
        "algorithm": {
            "init_args": {"topology": {"class_path": "x.RandomRegular", "init_args": {"degree": 4}}}
        },
    }
    assert run_setting(cfg) == {
        "dataset": "CIFAR-20",
        "partition": "Dir-0.3",
        "clients": 8,
        "graph": "RR4",
        "seed": 5,
    }


FEDDRM_CONFIG = """seed: {seed}
data:
  class_path: lightning_fed.data.FashionMNIST
  init_args:
    partition:
      class_path: lightning_fed.data.Shards
      init_args: {{per_client: 5}}
algorithm:
  class_path: lightning_fed.algorithms.FedDRM
"""


def _feddrm_run(root: Path, name: str, seed: int, accuracy: float) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"feddrm_accuracy": accuracy, "seed": seed}))
    (run / "config.yaml").write_text(FEDDRM_CONFIG.format(seed=seed))


def test_feddrm_runs_give_one_reference_row_per_setting(tmp_path: Path) -> None:
    """FedDRM runs (seeds 1, 2: 0.80, 0.90 -> 85.00 +/- 7.07) sit in the Reference group once, whatever
    the graphs of the EdgeDRM runs (Path and Cycle here); the oracle router stays per graph. In the
    Table 2 layout the FedDRM column repeats the setting's one value in every graph row."""
    for seed, graph in ((1, "Path"), (2, "Path"), (1, "Cycle"), (2, "Cycle")):
        acc = {
            ("EdgeDRM", "weighted history"): 0.5,
            ("oracle router on EdgeDRM experts", "weighted history"): 0.7,
        }
        _run(tmp_path, f"edgedrm-{graph}-seed{seed}", seed, graph, acc)
    _feddrm_run(tmp_path, "feddrm-seed1", 1, 0.8)
    _feddrm_run(tmp_path, "feddrm-seed2", 2, 0.9)
    # A summary without feddrm_accuracy, or of another algorithm, adds nothing.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "summary.json").write_text(json.dumps({"test_auroc_mean": 0.5}))
    rows = edgedrm_rows(tmp_path)
    fed = rows.filter(pl.col("method") == "FedDRM")
    assert fed.height == 2 and set(fed["graph"]) == {"Reference"} and set(fed["partition"]) == {"5-SPC"}
    table = edgedrm_table(rows)
    assert table.filter(pl.col("method") == "FedDRM").height == 1  # one number per setting
    md = edgedrm_markdown(table)
    assert md.splitlines()[2] == "| Reference | FedDRM | 85.00 ± 7.07 |"
    assert md.count("FedDRM") == 1 and "| Path | Oracle router | 70.00 ± 0.00 |" in md
    settings = edgedrm_settings_markdown(table).splitlines()
    assert settings[0] == "| graph | setting | FedDRM | Oracle router | EdgeDRM |"
    assert [line.split(" | ")[0] for line in settings[2:]] == ["| Path", "| Cycle"]  # no own Reference row
    assert all(" | 85.00 ± 7.07 | 70.00 ± 0.00 | **50.00 ± 0.00** |" in line for line in settings[2:])
    assert edgedrm_margins(table).height == 0  # no other decentralized method: no margins


def test_report_of_feddrm_runs_alone_writes_their_rows(tmp_path: Path) -> None:
    """A root of FedDRM runs only (Table 2's centralized row run on its own sweep, no referral table)
    still gets the EdgeDRM layouts: seeds 1, 2 at 0.80, 0.90 -> one Reference row, 85.00 +/- 7.07;
    nothing that needs a referral or a second method (paired, reach, checkpoints) is written."""
    from lightning_fed.reporting import report

    _feddrm_run(tmp_path / "runs", "feddrm-seed1", 1, 0.8)
    _feddrm_run(tmp_path / "runs", "feddrm-seed2", 2, 0.9)
    written = report(tmp_path / "runs", tmp_path / "out")
    assert {"edgedrm_table.md", "edgedrm_settings.md"} <= set(written)
    absent = {"referral.md", "edgedrm_paired.md", "referral_reach.md", "edgedrm_checkpoints.md"}
    assert not absent & set(written)
    assert "pareto.png" not in written  # these toy summaries have no AUROC to place
    settings = (tmp_path / "out" / "edgedrm_settings.md").read_text().splitlines()
    assert settings[0] == "| graph | setting | FedDRM |"
    assert settings[2] == "| Reference | FashionMNIST 5-SPC | 85.00 ± 7.07 |"
