"""Older runs (no ``centers.parquet``): each center's final test AUROC comes from the round the summary
evaluated, the restored best round when early stopping restored one, not the last round run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import CentersWriter, EarlyStopping, RoundsWriter
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.reporting.runs import read_runs
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


def _early_stopped_run(run: Path) -> dict:
    """FedAvg on 4 centers, 8 rounds, patience 2 (seed 3: the best round is 3, the run stops after 5)."""
    callbacks = [
        RoundsWriter(run / "rounds.parquet"),
        CentersWriter(run / "centers.parquet"),
        EarlyStopping(2),
    ]
    fed = Federation(
        make_federation([30, 20, 60, 40], seed=3),
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=8, local_epochs=1, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=callbacks),
        seed=3,
    )
    summary = fed.fit() | {"label": "fedavg", "method": "FedAvg"}
    (run / "summary.json").write_text(json.dumps(summary))
    return summary


def test_older_run_reads_the_restored_best_round(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fedavg-seed3"
    summary = _early_stopped_run(run)
    assert summary["restored_best"] and summary["best_round"] < summary["stopped_round"]  # the case
    final = pl.read_parquet(run / "centers.parquet")["test_auroc"].to_numpy()
    rounds = pl.read_parquet(run / "rounds.parquet")
    last = rounds.filter(pl.col("round") == summary["stopped_round"])["test_auroc"].to_numpy()
    assert not np.allclose(last, final, equal_nan=True)  # the last round run is not what was reported

    (run / "centers.parquet").unlink()  # as a run written before centers.parquet existed
    (record,) = read_runs(tmp_path / "runs")
    assert record.centers is None and record.final_round == summary["best_round"]
    older = record.center_test_auroc
    np.testing.assert_allclose(older["test_auroc"].to_numpy(), final, rtol=1e-6, equal_nan=True)
    assert older["test_robust"].null_count() == older.height  # unknown without centers.parquet


def test_final_round_not_evaluated_on_test_gives_no_numbers(tmp_path: Path) -> None:
    """``restore_best=False`` and a stop on a round the ``eval_every`` cadence skipped: no test AUROC at
    the final round, so none (never an earlier round's numbers)."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    summary = {"label": "x", "method": "FedAvg", "seed": 0, "stopped_round": 4, "restored_best": False}
    (run / "summary.json").write_text(json.dumps(summary | {"best_round": 2}))
    pl.DataFrame(
        {
            "round": [2, 2, 4, 4],
            "center": [0, 1, 0, 1],
            "name": ["a", "b", "a", "b"],
            "test_auroc": [0.6, 0.7, None, None],
        },
        schema_overrides={"test_auroc": pl.Float64},
    ).write_parquet(run / "rounds.parquet")
    (record,) = read_runs(tmp_path / "runs")
    assert record.final_round == 4 and record.center_test_auroc is None
