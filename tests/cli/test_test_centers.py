"""``lightning-fed test --run-dir`` writes ``centers.parquet`` from the checkpoint it evaluates."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from lightning_fed.cli import main

pytestmark = pytest.mark.cli  # drives the CLI end to end


def test_test_command_writes_centers_parquet_equal_to_the_fits(tmp_path: Path) -> None:
    """A run folder without ``centers.parquet`` (as runs written before it) gains it from ``test``:
    the checkpoint holds the parameters ``summary.json`` evaluated, so the rows equal the fit's."""
    main(
        [
            "fit",
            "--data.class_path=lightning_fed.data.SyntheticICU",
            "--data.init_args.num_centers=6",
            "--data.init_args.num_stays=1200",
            "--model.init_args.hidden=[8]",
            "--trainer.rounds=2",
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--output.progress_bar=false",
            "--logger.enabled=false",
        ]
    )
    run = tmp_path / "run"
    written_by_fit = pl.read_parquet(run / "centers.parquet")
    predicted_by_fit = pl.read_parquet(run / "predictions.parquet")
    (run / "centers.parquet").unlink()
    (run / "predictions.parquet").unlink()
    main(["test", "--run-dir", str(run)])
    again = pl.read_parquet(run / "centers.parquet")
    assert_frame_equal(again, written_by_fit)
    assert_frame_equal(pl.read_parquet(run / "predictions.parquet"), predicted_by_fit)
    summary = json.loads((run / "test.json").read_text())
    assert again["test_auroc_fragile"].sum() == summary["test_auroc_fragile"]
    assert not list(run.glob(".centers.parquet.*"))  # the atomic write left no temporary file
