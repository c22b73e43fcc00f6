"""``lightning-fed refer`` end to end on a tiny Digits federation, and the referral sweep + report."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from lightning_fed.cli import main

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

DIGITS = [
    "--data=lightning_fed.data.Digits",
    "--data.init_args.num_clients=4",
    "--data.init_args.max_per_client=120",
    "--model=lightning_fed.models.SmallCNN",
    "--model.init_args.embed_dim=16",
    "--trainer.rounds=2",
    "--trainer.local_epochs=1",
    "--trainer.batch_size=32",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]
EDGEDRM = [
    "--algorithm=lightning_fed.algorithms.EdgeDRM",
    "--algorithm.init_args.topology=lightning_fed.graphs.Cycle",
    "--algorithm.init_args.stage2_epochs=20",
]


def _fit(root: Path, name: str, *extra: str) -> Path:
    main(["fit", *DIGITS, *extra, f"--output.root={root}", f"--output.name={name}"])
    return root / name


def test_refer_writes_every_router_and_the_baseline_rows(tmp_path: Path) -> None:
    edrm = _fit(tmp_path, "edgedrm", *EDGEDRM)
    local = _fit(tmp_path, "local", "--algorithm=lightning_fed.algorithms.LocalOnly")
    main(["refer", f"--run-dir={edrm}", f"--baselines=[{local}]"])
    table = pl.read_csv(edrm / "referral.csv")
    routers = set(table["router"])
    assert {
        "EdgeDRM",
        "EdgeDRM w/o prior",
        "count-only",
        "random",
        "EdgeDRM-NR",
        "oracle router on EdgeDRM experts",
    } <= routers
    assert "DFedAvgM (stage I)" in routers and "LocalOnly (local)" in routers
    assert table.filter(pl.col("router") == "EdgeDRM").height == 3  # three prediction rules
    assert table["accuracy"].is_between(0, 1).all()
    nr = table.filter(pl.col("router") == "EdgeDRM-NR")
    assert (nr["calls_per_query"] == 1).all()
    png = (edrm / "referral_traffic.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (edrm / "referral.md").read_text()
    # A header naming the run and its setting, then the table with the headline row marked, one
    # EdgeDRM-NR row (every rule gives it alike), accuracies in %, and a legend.
    assert md.startswith("# Referral: edgedrm\n") and "graph: Cycle (4 clients, 4 edges)" in md
    assert "L (max hops): " in md and "queries: test (" in md
    assert "| * | EdgeDRM | weighted history |" in md
    assert md.count("| EdgeDRM-NR |") == 1 and "| accuracy (%) |" in md and "`source_reached`:" in md
    # One row per query, router and rule; its mean correctness is the table's accuracy, exactly.
    per_query = pl.read_parquet(edrm / "referral_queries.parquet")
    assert per_query.height == int(table.height and per_query["query"].n_unique()) * table.height
    joined = per_query.group_by("router", "prediction_rule").agg(pl.col("correct").mean().alias("acc"))
    joined = joined.join(
        table.select("router", "prediction_rule", "accuracy"), on=["router", "prediction_rule"]
    )
    assert joined.height == table.height and (joined["acc"] == joined["accuracy"]).all()
    # The report gathers every run's referral table (twice: its own output is not a run).
    for _ in range(2):
        main(["report", str(tmp_path)])
    combined = pl.read_csv(tmp_path / "report" / "referral.csv")
    assert set(combined["run"]) == {"edgedrm"} and combined.height == table.height
    assert (tmp_path / "report" / "referral_gain.png").read_bytes()[:4] == b"\x89PNG"
    # Routers paired by query: one row per router other than EdgeDRM (8 routers and rows in all).
    paired = (tmp_path / "report" / "referral_queries_paired.md").read_text()
    assert paired.count("| Cycle |") == table["router"].n_unique() - 1


def test_refer_refuses_a_run_without_potentials(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    local = _fit(tmp_path, "local", "--algorithm=lightning_fed.algorithms.LocalOnly")
    with pytest.raises(SystemExit):
        main(["refer", f"--run-dir={local}"])
    err = capsys.readouterr().err
    assert "no routing potentials" in err and "--baselines" in err
    assert not (local / "referral.csv").exists()


def test_refer_on_a_missing_folder_is_clear(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One line, and nothing created (main left an empty ``nope/`` behind: the output lock made it)."""
    with pytest.raises(SystemExit):
        main(["refer", f"--run-dir={tmp_path / 'nope'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--run-dir" in err[0] and "no config.yaml" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_refer_routers_from_the_command_line(tmp_path: Path) -> None:
    """``--routers`` (class_path entries) replaces the six default routers; the stage-I row stays."""
    edrm = _fit(tmp_path, "edgedrm", *EDGEDRM)
    routers = (
        "--routers=[{class_path: lightning_fed.referral.routers.EdgeDRMRouter, "
        "init_args: {prior: false, label: mine}}]"
    )
    main(["refer", f"--run-dir={edrm}", routers])
    assert set(pl.read_csv(edrm / "referral.csv")["router"]) == {"mine", "DFedAvgM (stage I)"}
