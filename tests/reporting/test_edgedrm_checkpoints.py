"""Encoder gap, head shift and potential norm of an EdgeDRM checkpoint against a 3-client hand computation."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
import torch

from lightning_fed.reporting.edgedrm_checkpoints import (
    checkpoint_markdown,
    checkpoint_rows,
    checkpoint_stats,
    checkpoint_table,
)
from tests.reporting.edgedrm_config import rr4_dir03_config


def _federation(scale: float = 1.0) -> dict:
    """phi_0 = (3, 4), phi_1 = (0, 5), phi_2 = (4, 3) (first coordinate in the encoder, second in the
    projection; all norms 5); the ledger's pairs (0, 1), (1, 0), (1, 2) and a self pair (0, 0) give the
    edges {0-1, 1-2}. Stage-I heads all ones (3 x 1 x 2, norm sqrt 6); stage II adds 1 to two entries
    (shift sqrt 2 / sqrt 6); theta rows (3, 4), (0, 0), (6, 8) have norms 5, 0, 10 (mean 5)."""
    head1 = torch.ones(3, 1, 2)
    head = head1.clone()
    head[0, 0, 0] += 1.0
    head[2, 0, 1] += 1.0
    return {
        "engine": {
            "params": {
                "encoder.0.weight": torch.tensor([[3.0], [0.0], [4.0]]) * scale,
                "projection.0.weight": torch.tensor([[4.0], [5.0], [3.0]]) * scale,
                "head.weight": head,
                "head.bias": torch.full((3, 1), 100.0),  # not part of any of the three numbers
            }
        },
        "ledger": {"u": torch.tensor([0, 1, 1, 0]), "v": torch.tensor([1, 0, 2, 0])},
        "algorithm": {
            "stage1_head": {"head.weight": head1},
            "potentials": {"theta": torch.tensor([[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]])},
        },
    }


def test_three_client_hand_computation() -> None:
    """gap = (||(3, -1)|| + ||(-4, 2)||) / 2 / 5 = (sqrt 10 + sqrt 20) / 10; it is scale-free."""
    stats = checkpoint_stats(_federation())
    assert stats["encoder_gap"] == pytest.approx((math.sqrt(10) + math.sqrt(20)) / 10)
    assert checkpoint_stats(_federation(7.0))["encoder_gap"] == pytest.approx(stats["encoder_gap"])
    assert stats["head_shift"] == pytest.approx(math.sqrt(2 / 6))
    assert stats["theta_norm"] == pytest.approx(5.0)
    bare = _federation()
    bare["algorithm"], bare["ledger"] = {}, {}
    assert checkpoint_stats(bare) == {"encoder_gap": None, "head_shift": None, "theta_norm": None}


def test_rows_table_and_markdown_from_run_folders(tmp_path: Path) -> None:
    """Two seeds at lambda 0.5 (theta scaled by 1 and 3: norms 5 and 15, mean 10, SD 7.07) and a
    non-EdgeDRM checkpoint (no stage-I head), which is left out."""
    for seed, factor in ((2025, 1.0), (2026, 3.0)):
        run = tmp_path / f"lam050-seed{seed}"
        run.mkdir()
        fed = _federation()
        fed["algorithm"]["potentials"]["theta"] *= factor
        torch.save({"federation": fed}, run / "checkpoint.pt")
        (run / "config.yaml").write_text(rr4_dir03_config(seed, 0.5, clients=3))
        (run / "summary.json").write_text("{}")
        pl.DataFrame(
            {"router": ["EdgeDRM"], "prediction_rule": ["hard terminal"], "accuracy": [0.5]}
        ).write_csv(run / "referral.csv")
    other = tmp_path / "other-seed2025"
    other.mkdir()
    fed = _federation()
    fed["algorithm"] = {}
    torch.save({"federation": fed}, other / "checkpoint.pt")
    for name in ("config.yaml", "summary.json", "referral.csv"):
        (other / name).write_bytes((tmp_path / "lam050-seed2025" / name).read_bytes())
    rows = checkpoint_rows(tmp_path)
    assert rows.height == 2 and set(rows["seed"]) == {2025, 2026}
    row = checkpoint_table(rows).row(0, named=True)
    assert row["theta_norm_mean"] == pytest.approx(10.0) and row["theta_norm_sd"] == pytest.approx(50**0.5)
    assert row["head_shift_sd"] == pytest.approx(0.0) and row["seeds"] == 2
    md = checkpoint_markdown(checkpoint_table(rows))
    gap = (math.sqrt(10) + math.sqrt(20)) / 10
    assert (
        f"| FashionMNIST | Dir-0.3 | 3 | RR4 | 0.50 | {gap:.4f} ± 0.0000 | 0.577 ± 0.000 | 10.00 ± 7.07 | 2 |"
        in md
    )
    assert checkpoint_markdown(checkpoint_table(checkpoint_rows(tmp_path / "none"))) == ""
