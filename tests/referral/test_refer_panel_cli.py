"""``fit`` + ``refer`` with the query panel in the run's config (the tier configs' path), on Digits."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from lightning_fed.cli import main

from .test_refer_cli import DIGITS, EDGEDRM

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

PANEL = (
    "--callbacks=[{class_path: lightning_fed.referral.panel.QueryPanel, init_args: {images: 20, records: 4}}]"
)


def test_refer_reads_the_panel_from_the_run_config(tmp_path: Path) -> None:
    """4 clients, 20 untransformed images (2 per class) x 4 records: 80 arrivals, 20 per client, so
    EdgeDRM-NR's peak share is exactly 25 %; ``--queries test`` goes back to the test splits and
    ``--queries every-entry`` puts every test row at every client."""
    main(["fit", *DIGITS, *EDGEDRM, PANEL, f"--output.root={tmp_path}", "--output.name=edgedrm"])
    run = tmp_path / "edgedrm"
    main(["refer", f"--run-dir={run}"])
    table = pl.read_csv(run / "referral.csv")
    assert set(table["queries"]) == {"panel 20x4"}
    for router in ("EdgeDRM-NR", "DFedAvgM (stage I)"):
        row = table.filter(pl.col("router") == router).row(0, named=True)
        assert row["peak_share"] == 25.0 and row["calls_per_query"] == 1.0
    assert table["accuracy"].is_between(0, 1).all()
    main(["refer", f"--run-dir={run}", "--queries=test", f"--out={tmp_path / 'test'}"])
    assert set(pl.read_csv(tmp_path / "test" / "referral.csv")["queries"]) == {"test"}
    # Every test row at every client (the ISIC2019 protocol): entries exactly uniform, so NR's peak
    # share is 25 % again, now over the test rows.
    main(["refer", f"--run-dir={run}", "--queries=every-entry", f"--out={tmp_path / 'every'}"])
    every = pl.read_csv(tmp_path / "every" / "referral.csv")
    assert set(every["queries"]) == {"every entry"}
    nr = every.filter(pl.col("router") == "EdgeDRM-NR").row(0, named=True)
    assert nr["peak_share"] == 25.0 and nr["calls_per_query"] == 1.0 and nr["source_in_reach"] == 100.0


def test_a_panel_that_cannot_be_balanced_fails_before_training(tmp_path: Path, capsys) -> None:
    """The panel is checked when the federation is built: one line naming the fix, exit 2, no
    traceback and no training."""
    bad = PANEL.replace("images: 20, records: 4", "images: 10, records: 1")
    with pytest.raises(SystemExit) as exc:
        main(["fit", *DIGITS, *EDGEDRM, bad, f"--output.root={tmp_path}", "--output.name=bad"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "10 arrival records cannot enter 4 clients" in err[-1] and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "bad" / "checkpoint.pt").exists()
