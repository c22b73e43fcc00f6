"""The referral summary plots draw from referral tables and refuse tables without their columns."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from lightning_fed.referral.summary_plots import gain_plot, tier_share_plot


def _table() -> pl.DataFrame:
    rows = []
    for run in ("path", "complete"):
        for router, acc in (("EdgeDRM-NR", 0.3), ("EdgeDRM", 0.6)):
            rows.append(
                {
                    "run": run,
                    "router": router,
                    "prediction_rule": "weighted history",
                    "accuracy": acc,
                    "share_small": 50.0,
                    "share_large": 50.0,
                }
            )
    return pl.DataFrame(rows)


def test_plots_write_pngs(tmp_path: Path) -> None:
    gain_plot(_table(), tmp_path / "gain.png")
    tier_share_plot(_table(), tmp_path / "tiers.png")
    for name in ("gain.png", "tiers.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_plots_refuse_unknown_rules() -> None:
    with pytest.raises(ValueError, match="no rows"):
        gain_plot(_table(), rule="nope")
    with pytest.raises(ValueError, match="share"):
        tier_share_plot(_table().drop("share_small", "share_large"))
