"""``metrics:`` through ``lightning-fed fit``: summary, rounds.parquet and report's runs.csv carry the
torchmetrics numbers; a bad entry is one line naming ``metrics[i]`` before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.cli import main

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config",
    str(ROOT / "configs" / "quickstart.yaml"),
    "--trainer.rounds=2",
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--output.progress_bar=false",
    "--logger.enabled=false",
]


def test_fit_records_the_metrics_in_summary_rounds_and_runs_csv(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(
        "metrics:\n  - torchmetrics.classification.BinaryAveragePrecision\n"
        "  - class_path: torchmetrics.classification.BinaryCalibrationError\n    init_args: {n_bins: 10}\n"
    )
    main(["fit", *TINY, "--config", str(metrics), f"--output.root={tmp_path}/runs", "--output.name=run"])
    run = tmp_path / "runs" / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metrics"] == ["binary_average_precision", "binary_calibration_error"]
    assert 0 < summary["test_binary_average_precision_defined"] <= 6
    assert 0 <= summary["test_binary_calibration_error_mean"] <= 1
    rounds = pl.read_parquet(run / "rounds.parquet")
    assert {"val_binary_average_precision", "test_binary_calibration_error"} <= set(rounds.columns)
    assert rounds.height == 2 * 6
    last = rounds.filter(pl.col("round") == 1)["test_binary_calibration_error"].mean()
    assert last == pytest.approx(summary["test_binary_calibration_error_mean"])
    main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")])
    runs = pl.read_csv(tmp_path / "report" / "runs.csv")
    assert runs["test_binary_average_precision_mean"][0] == pytest.approx(
        summary["test_binary_average_precision_mean"]
    )


def test_a_bad_metric_is_one_line_before_anything_is_built(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fit", *TINY, "--metrics=[torch.nn.Linear]", f"--output.root={tmp_path}/runs"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "metrics[0]: torch.nn.Linear is not a torchmetrics.Metric" in err, err
    assert not (tmp_path / "runs").exists()
